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
    let mut compressor =
        zstd::bulk::Compressor::new(COMPRESSION_LEVEL).map_err(EncodeError::new)?;
    // 4 bytes buy a check of the output: a corrupted frame is refused rather than
    // decoded into a different (possibly still valid) envelope.
    compressor
        .include_checksum(true)
        .map_err(EncodeError::new)?;
    let frame = compressor.compress(&msgpack).map_err(EncodeError::new)?;
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
/// [`MAX_DECOMPRESSED`] is [`DecodeError::Malformed`]. The output grows as data
/// arrives, never to a size the frame merely declares.
pub(super) fn decompress(bytes: &[u8]) -> Result<Vec<u8>, DecodeError> {
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
        return Err(DecodeError::malformed(format!(
            "the zstd frame inflates to more than {MAX_DECOMPRESSED} bytes"
        )));
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
