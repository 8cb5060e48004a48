//! The optional zstd frame around an envelope's MessagePack bytes.

use std::io::Read as _;

use crate::codec::{DecodeError, EncodeError};

/// The zstd frame magic number (`0xFD2FB528` little-endian). A MessagePack envelope starts
/// with a map marker (`0x8x`, `0xde` or `0xdf`), never `0x28`, so the first byte tells the
/// two apart.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// MessagePack envelopes up to this many bytes are sent as they are: tombstones
/// (~150 bytes) and tiny objects gain little or nothing from compression (a zstd frame
/// costs ~10 bytes of header and checksum), and decoding them stays a single step.
pub const COMPRESS_THRESHOLD: usize = 256;

/// The zstd level writers use: level 3 (zstd's default) compresses a 1 MiB envelope in a
/// few milliseconds and gets most of what higher levels would.
pub const COMPRESSION_LEVEL: i32 = 3;

/// Largest MessagePack envelope a reader decompresses (8 MiB: eight times the NATS default
/// `max_payload`, far above the ~1.5 MiB etcd allows for one Kubernetes object). A frame
/// that would inflate further is refused as malformed, whatever content size it declares
/// (that field is written by the sender and cannot be trusted). Writers refuse to compress
/// an envelope above it, so every envelope they publish can be read back.
pub const MAX_DECOMPRESSED: usize = 8 * 1024 * 1024;

/// Largest window (2^23 = 8 MiB, the same bound) a frame may ask the decoder to allocate.
/// zstd's own default allows 128 MiB. A level-3 frame of an input under 8 MiB never needs
/// more: the encoder shrinks the window to the input's size.
const WINDOW_LOG_MAX: u32 = 23;

/// `msgpack` compressed when it is larger than [`COMPRESS_THRESHOLD`] and the frame is
/// smaller; otherwise `msgpack` itself.
pub(super) fn maybe_compress(msgpack: Vec<u8>) -> Result<Vec<u8>, EncodeError> {
    if msgpack.len() <= COMPRESS_THRESHOLD {
        return Ok(msgpack);
    }
    if msgpack.len() > MAX_DECOMPRESSED {
        return Err(EncodeError::new(format!(
            "the envelope is {} bytes before compression; readers accept at most {MAX_DECOMPRESSED}",
            msgpack.len()
        )));
    }
    let frame = COMPRESSOR.with_borrow_mut(|slot| {
        let compressor = match slot {
            Some(c) => c,
            None => slot.insert(new_compressor()?),
        };
        compressor.compress(&msgpack)
    });
    let frame = frame.map_err(EncodeError::new)?;
    Ok(if frame.len() < msgpack.len() {
        frame
    } else {
        msgpack
    })
}

/// Whether `bytes` are a zstd frame rather than plain MessagePack.
pub(super) fn is_compressed(bytes: &[u8]) -> bool {
    bytes.starts_with(&ZSTD_MAGIC)
}

/// The MessagePack bytes inside exactly one zstd frame filling all of `bytes`. A corrupt or
/// truncated frame, more than one frame or trailing bytes, or content above
/// [`MAX_DECOMPRESSED`] is [`DecodeError::Malformed`]. A frame declaring its size gets a
/// buffer of that size if it is at most [`MAX_DECOMPRESSED`] (zstd refuses content that does
/// not match the declaration); one declaring none inflates into a buffer that grows as data
/// arrives, up to the limit.
pub(super) fn decompress(bytes: &[u8]) -> Result<Vec<u8>, DecodeError> {
    // Exactly one frame: a second one, or trailing bytes, would give the message two
    // meanings.
    let frame_len = zstd::zstd_safe::find_frame_compressed_size(bytes).map_err(|code| {
        DecodeError::malformed(format!(
            "not a whole zstd frame: {}",
            zstd::zstd_safe::get_error_name(code)
        ))
    })?;
    if frame_len != bytes.len() {
        return Err(DecodeError::malformed(format!(
            "{} trailing bytes after the zstd frame",
            bytes.len().saturating_sub(frame_len)
        )));
    }
    match zstd::zstd_safe::get_frame_content_size(bytes) {
        // What our writers send (the one-shot compressor records the size): one call
        // into a buffer of exactly the declared size, with a context kept per thread
        // (creating one per message cost more than the decoding). zstd checks the
        // declared size against what the frame really inflates to.
        Ok(Some(declared)) if declared <= MAX_DECOMPRESSED as u64 => {
            let mut out = Vec::with_capacity(usize::try_from(declared).unwrap_or(0));
            DECOMPRESSOR
                .with_borrow_mut(|slot| {
                    let d = match slot {
                        Some(d) => d,
                        None => slot.insert(new_decompressor()?),
                    };
                    d.decompress_to_buffer(bytes, &mut out)
                })
                .map_err(DecodeError::malformed)?;
            Ok(out)
        }
        Ok(Some(_)) => Err(too_large()),
        // No declared size (a streaming writer): inflate with a hard limit.
        _ => decompress_streaming(bytes),
    }
}

fn too_large() -> DecodeError {
    DecodeError::malformed(format!(
        "the zstd frame inflates to more than {MAX_DECOMPRESSED} bytes"
    ))
}

thread_local! {
    /// Contexts reused per thread: a level-3 context allocates about a megabyte.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

fn new_compressor() -> std::io::Result<zstd::bulk::Compressor<'static>> {
    let mut c = zstd::bulk::Compressor::new(COMPRESSION_LEVEL)?;
    c.include_checksum(true)?;
    Ok(c)
}

fn new_decompressor() -> std::io::Result<zstd::bulk::Decompressor<'static>> {
    let mut d = zstd::bulk::Decompressor::new()?;
    d.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(WINDOW_LOG_MAX))?;
    Ok(d)
}

/// Inflates one frame that does not declare its size, stopping one byte past
/// [`MAX_DECOMPRESSED`].
fn decompress_streaming(bytes: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut decoder = zstd::stream::read::Decoder::with_buffer(bytes)
        .map_err(DecodeError::malformed)?
        .single_frame();
    decoder
        .window_log_max(WINDOW_LOG_MAX)
        .map_err(DecodeError::malformed)?;
    let mut out = Vec::new();
    // One byte past the limit tells "exactly the limit" from "more".
    let limit = u64::try_from(MAX_DECOMPRESSED).unwrap_or(u64::MAX);
    (&mut decoder)
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(DecodeError::malformed)?;
    if out.len() > MAX_DECOMPRESSED {
        return Err(too_large());
    }
    let rest = decoder.finish();
    if !rest.is_empty() {
        return Err(DecodeError::malformed(format!(
            "{} trailing bytes after the zstd frame",
            rest.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `len` pseudo-random bytes (xorshift): nothing for zstd to find.
    fn noise(len: usize) -> Vec<u8> {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()[0]
            })
            .collect()
    }

    #[test]
    fn incompressible_bytes_are_sent_plain() {
        let bytes = noise(COMPRESS_THRESHOLD * 4);
        assert_eq!(maybe_compress(bytes.clone()).unwrap(), bytes);
    }

    #[test]
    fn at_or_below_the_threshold_nothing_is_compressed() {
        let small = vec![0u8; COMPRESS_THRESHOLD];
        assert_eq!(maybe_compress(small.clone()).unwrap(), small);
        let frame = maybe_compress(vec![0u8; COMPRESS_THRESHOLD + 1]).unwrap();
        assert!(is_compressed(&frame));
        assert_eq!(
            decompress(&frame).unwrap(),
            vec![0u8; COMPRESS_THRESHOLD + 1]
        );
    }

    #[test]
    fn exactly_the_limit_inflates() {
        let frame = maybe_compress(vec![7u8; MAX_DECOMPRESSED]).unwrap();
        assert_eq!(decompress(&frame).unwrap().len(), MAX_DECOMPRESSED);
    }
}
