//! Reading a whole KV bucket (the registry for `clusters`, drift state for `drift ls`).

use futures::TryStreamExt;

/// Any error of the bucket calls, for the caller to wrap with the bucket's name.
pub type KvError = Box<dyn std::error::Error + Send + Sync>;

/// Every key of `bucket` (live keys: deleted ones are not listed).
pub async fn keys(
    js: &async_nats::jetstream::Context,
    bucket: &str,
) -> Result<(async_nats::jetstream::kv::Store, Vec<String>), KvError> {
    let kv = js.get_key_value(bucket).await.map_err(Box::new)?;
    let keys = kv
        .keys()
        .await
        .map_err(Box::new)?
        .try_collect()
        .await
        .map_err(Box::new)?;
    Ok((kv, keys))
}
