//! YAML request bodies and the kubeconfig file, through `serde-saphyr` (the crate
//! kube-client reads kubeconfigs with).
//!
//! Bodies are read with the YAML 1.2 core schema (`yes` and `010` stay strings), a
//! repeated key keeps its last value, and the reader's budget bounds what a body can
//! make the server spend: nesting (the lexical pre-scan in `limits` comes first),
//! nodes, alias expansion ("billion laughs") and scalar bytes, replayed ones included.
//! Written YAML quotes every string a YAML 1.1 reader (kubectl) would not read as a
//! string.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Deepest nesting the YAML reader builds, below `limits::MAX_DEPTH` (what a stored
/// object may reach): the reader recurses per level, ~15 KiB of stack each in a debug
/// build, and bodies are decoded on tokio threads with 2 MiB stacks (130 levels
/// overflow them). The lexical pre-scan still refuses deep flow nesting first, with
/// the API server's message.
const MAX_DEPTH: usize = 64;

/// Scalar bytes one body may produce, aliases replayed included: a few times the
/// largest body, so an anchored scalar cannot be multiplied into gigabytes.
const MAX_SCALAR_BYTES: usize = 4 * crate::body::MAX_BODY;

/// Reads one YAML document from a request body.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_saphyr::Error> {
    let options = serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::LastWins,
        // The message goes into one metav1.Status line.
        with_snippet: false,
        budget: serde_saphyr::budget! {
            max_depth: MAX_DEPTH,
            max_total_scalar_bytes: MAX_SCALAR_BYTES,
        },
    };
    serde_saphyr::from_slice_with_options(bytes, options)
}

/// Writes one YAML document (long strings on one line, as kubectl writes them).
pub fn to_string<T: Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    let options = serde_saphyr::ser_options! { folded_wrap_chars: usize::MAX };
    serde_saphyr::to_string_with_options(value, options)
}
