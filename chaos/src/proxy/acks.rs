//! Reading the NATS protocol as it goes through the proxy, to drop
//! JetStream acknowledgements alone ([`super::Fault::DropAcks`]) and leave
//! every other operation as it is.
//!
//! Two kinds of acknowledgement cross an agent's link:
//! - a consumer's ack of a delivered message: the client publishes to the
//!   message's reply subject, `$JS.ACK.<stream>.<consumer>.…` (`PUB`/`HPUB`,
//!   client → server; `+ACK`, `-NAK`, `+WPI`, `+TERM` alike);
//! - the server's acknowledgement of a publish to a stream: a `MSG` to the
//!   publisher's reply inbox, without a reply subject, whose JSON payload
//!   starts `{"stream":` (nats-server's `PubAck`: `stream`, `seq`, then
//!   `duplicate` when the message id was seen already).
//!
//! Frames are control lines ending in `\r\n`; `PUB`, `HPUB`, `MSG` and
//! `HMSG` are followed by the number of payload bytes their last argument
//! gives, then `\r\n`. A connection that does not start like NATS (TLS,
//! HTTP to an API server) is passed on untouched from its first byte on.

/// Operations of either direction (nats-server's client protocol).
const OPS: &[&str] = &[
    "CONNECT", "PUB", "HPUB", "SUB", "UNSUB", "PING", "PONG", "INFO", "MSG", "HMSG", "+OK", "-ERR",
];
/// A control line longer than this is not NATS (INFO and CONNECT are a
/// few KiB at most): the rest of the connection is passed on as is.
const MAX_LINE: usize = 64 * 1024;
/// A `MSG` without reply subject up to this size is held whole until its
/// payload shows whether it is a publish acknowledgement (they are tiny).
const MAX_HELD: usize = 4096;
/// The start of a publish acknowledgement's payload.
const PUB_ACK: &[u8] = br#"{"stream":"#;
/// The subjects consumer acknowledgements are published to.
const CONSUMER_ACK: &str = "$JS.ACK.";

/// Where the reader is in one direction's byte stream.
#[derive(Debug)]
enum State {
    /// Reading a control line: the bytes so far, of which the first `sent`
    /// were forwarded already (a line is held only while acks are dropped).
    Line { buf: Vec<u8>, sent: usize },
    /// Inside a payload: bytes left, its trailing `\r\n` included.
    Payload { left: usize, to: Payload },
    /// Not NATS, or lost: everything passes.
    Raw,
}

/// What becomes of the payload being read.
#[derive(Debug)]
enum Payload {
    Forward,
    Drop,
    /// Held with its control line until it is whole and can be told apart.
    Hold(Vec<u8>),
}

/// One direction of one connection.
#[derive(Debug)]
pub struct Reader {
    state: State,
}

impl Default for Reader {
    fn default() -> Self {
        Reader {
            state: State::Line {
                buf: Vec::new(),
                sent: 0,
            },
        }
    }
}

/// The outcome of one chunk: bytes to forward and acknowledgements dropped.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Fed {
    pub forward: Vec<u8>,
    pub dropped: u64,
}

impl Reader {
    /// Reads `chunk`; with `drop_acks`, the acknowledgements it completes are
    /// left out of what is forwarded, and the bytes of an unfinished control
    /// line (or of a message that may be an ack) are held until it is
    /// complete. Without, everything is forwarded at once.
    pub fn feed(&mut self, chunk: &[u8], drop_acks: bool) -> Fed {
        let mut fed = Fed::default();
        let mut rest = chunk;
        while !rest.is_empty() {
            rest = self.step(rest, drop_acks, &mut fed);
        }
        fed
    }

    /// Consumes a prefix of `input`, returns what is left of it.
    fn step<'a>(&mut self, input: &'a [u8], drop_acks: bool, fed: &mut Fed) -> &'a [u8] {
        match &mut self.state {
            State::Raw => {
                fed.forward.extend_from_slice(input);
                &[]
            }
            State::Payload { left, to } => {
                let n = (*left).min(input.len());
                let (part, rest) = input.split_at(n);
                *left -= n;
                match to {
                    Payload::Forward => fed.forward.extend_from_slice(part),
                    Payload::Drop => {}
                    Payload::Hold(held) => held.extend_from_slice(part),
                }
                if *left == 0 {
                    if let Payload::Hold(held) = to {
                        if drop_acks && is_pub_ack(held) {
                            fed.dropped += 1;
                        } else {
                            fed.forward.append(held);
                        }
                    }
                    self.state = State::Line {
                        buf: Vec::new(),
                        sent: 0,
                    };
                }
                rest
            }
            State::Line { buf, sent } => {
                let (part, rest, complete) = match input.iter().position(|b| *b == b'\n') {
                    Some(i) => (&input[..=i], &input[i + 1..], true),
                    None => (input, &[][..], false),
                };
                buf.extend_from_slice(part);
                if !plausible(buf) {
                    fed.forward.extend_from_slice(&buf[*sent..]);
                    self.state = State::Raw;
                    return rest;
                }
                if !drop_acks {
                    fed.forward.extend_from_slice(&buf[*sent..]);
                    *sent = buf.len();
                }
                if complete {
                    let (line, sent) = (std::mem::take(buf), *sent);
                    self.state = after_line(line, sent, drop_acks, fed);
                }
                rest
            }
        }
    }
}

/// What follows the complete control line `line`, whose first `sent` bytes
/// were forwarded already (then it cannot be dropped any more).
fn after_line(line: Vec<u8>, sent: usize, drop_acks: bool, fed: &mut Fed) -> State {
    let line_start = State::Line {
        buf: Vec::new(),
        sent: 0,
    };
    let text = String::from_utf8_lossy(&line).into_owned();
    let args: Vec<&str> = text.split_whitespace().collect();
    let op = args
        .first()
        .map(|o| o.to_ascii_uppercase())
        .unwrap_or_default();
    let size = match op.as_str() {
        "PUB" | "HPUB" | "MSG" | "HMSG" => args.last().and_then(|s| s.parse::<usize>().ok()),
        _ => {
            fed.forward.extend_from_slice(&line[sent..]);
            return line_start;
        }
    };
    let Some(size) = size else {
        // A payload of unknown length: the stream cannot be followed.
        fed.forward.extend_from_slice(&line[sent..]);
        return State::Raw;
    };
    let left = size + 2;
    let consumer_ack = matches!(op.as_str(), "PUB" | "HPUB")
        && args.get(1).is_some_and(|s| s.starts_with(CONSUMER_ACK));
    // MSG <subject> <sid> <size>: no reply subject, as a publish ack.
    let maybe_pub_ack = op == "MSG" && args.len() == 4 && size <= MAX_HELD;
    let whole = sent == 0 && drop_acks;
    let to = if consumer_ack && whole {
        fed.dropped += 1;
        Payload::Drop
    } else if maybe_pub_ack && whole {
        Payload::Hold(line)
    } else {
        fed.forward.extend_from_slice(&line[sent..]);
        Payload::Forward
    };
    State::Payload { left, to }
}

/// Whether a control line read so far can still be NATS: its operation
/// name, while it is read, is the start of one; once it ends, is one.
fn plausible(line: &[u8]) -> bool {
    if line.len() > MAX_LINE {
        return false;
    }
    let end = line
        .iter()
        .position(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'));
    let name = &line[..end.unwrap_or(line.len())];
    if end == Some(0) {
        // An empty line: harmless, passed on.
        return true;
    }
    OPS.iter().any(|op| {
        let op = op.as_bytes();
        match end {
            Some(_) => name.eq_ignore_ascii_case(op),
            None => name.len() <= op.len() && name.eq_ignore_ascii_case(&op[..name.len()]),
        }
    })
}

/// Whether a held `MSG` frame (control line and payload) is a publish ack.
fn is_pub_ack(frame: &[u8]) -> bool {
    let payload = frame
        .iter()
        .position(|b| *b == b'\n')
        .map_or(&[][..], |i| &frame[i + 1..]);
    payload.starts_with(PUB_ACK)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PUB_ACK_MSG: &[u8] = b"MSG _INBOX.abc.1 7 29\r\n{\"stream\":\"OBJECTS\",\"seq\":42}\r\n";
    const API_REPLY: &[u8] = b"MSG _INBOX.abc.2 7 20\r\n{\"type\":\"io.nats.x\"}\r\n";
    const DELIVERY: &[u8] = b"MSG fb.obj.c1.x 3 $JS.ACK.OBJECTS.c.1.5.5.1.0 5\r\nhello\r\n";
    const CONSUMER_ACK_PUB: &[u8] = b"PUB $JS.ACK.OBJECTS.c.1.5.5.1.0 4\r\n+ACK\r\n";
    const PUBLISH: &[u8] = b"HPUB fb.obj.c1.x _INBOX.abc.1 12 17\r\nNATS/1.0\r\n\r\nhello\r\n";

    fn all(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    /// Feeds `input` in chunks of `size` bytes.
    fn chunked(input: &[u8], size: usize, drop_acks: bool) -> Fed {
        let mut r = Reader::default();
        let mut out = Fed::default();
        for c in input.chunks(size) {
            let f = r.feed(c, drop_acks);
            out.forward.extend(f.forward);
            out.dropped += f.dropped;
        }
        out
    }

    #[test]
    fn passes_everything_when_not_dropping_whatever_the_chunks() {
        let up = all(&[
            b"CONNECT {}\r\nPING\r\n",
            CONSUMER_ACK_PUB,
            PUBLISH,
            b"SUB a 1\r\n",
        ]);
        let down = all(&[b"INFO {}\r\n+OK\r\n", PUB_ACK_MSG, DELIVERY, API_REPLY]);
        for size in [1, 2, 7, 64, 4096] {
            assert_eq!(chunked(&up, size, false).forward, up, "chunks of {size}");
            assert_eq!(
                chunked(&down, size, false).forward,
                down,
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn drops_consumer_acks_and_publish_acks_only() {
        let up = all(&[b"PING\r\n", CONSUMER_ACK_PUB, PUBLISH, CONSUMER_ACK_PUB]);
        let down = all(&[PUB_ACK_MSG, DELIVERY, API_REPLY, PUB_ACK_MSG, b"PONG\r\n"]);
        for size in [1, 3, 4096] {
            let u = chunked(&up, size, true);
            assert_eq!(u.forward, all(&[b"PING\r\n", PUBLISH]), "chunks of {size}");
            assert_eq!(u.dropped, 2);
            let d = chunked(&down, size, true);
            assert_eq!(d.forward, all(&[DELIVERY, API_REPLY, b"PONG\r\n"]));
            assert_eq!(d.dropped, 2);
        }
    }

    #[test]
    fn anything_but_nats_passes_untouched_at_once() {
        for input in [
            &b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01][..],
            &b"PUT /x HTTP/1.1\r\n"[..],
        ] {
            let mut r = Reader::default();
            // The first byte that is not NATS is forwarded with what follows.
            let f = r.feed(input, true);
            assert_eq!(f.forward, input);
            assert_eq!(r.feed(CONSUMER_ACK_PUB, true).forward, CONSUMER_ACK_PUB);
        }
    }
}
