//! `fleetbus rules preview -f rule.yaml`, the origins' side (PROTOCOL §6.8): before the
//! sinks are asked, every member is asked on `<p>.cmd.<cluster>.preview-source` for the
//! envelopes it would publish for the candidate that the bus does not hold yet (pages
//! followed), and those go in each sink's preview request (`sources`), with
//! `sourcesComplete` when every origin gave everything and all of it fits one request.
//! Agents are not let publish on each other's command subjects: the CLI brokers.

use std::io::Write;

use fleetbus_schemas::preview::{
    PageToken, PreviewProblem, PreviewRequest, PreviewSourceReply, PreviewSourceRequest,
    SourceEnvelope,
};
use fleetbus_schemas::subject::{CommandKey, ObjectKey};
use serde_json::{json, Value};

use super::error::PreviewError;
use crate::cli::RulesPreviewArgs;

/// The most pages asked of one origin: one that keeps sending `next` cannot hold the
/// command (1,000 pages of 1 MiB: far more than a fleet's objects of one kind).
const MAX_PAGES: usize = 1000;

/// What a preview request may take besides its members: the fleet root's signature and
/// the `sources`/`sourcesComplete` frame.
const REQUEST_FRAME: usize = 1024;

fn stopped(cluster: &str, pages: usize) -> String {
    format!(
        "cluster {cluster} has more source envelopes than one preview request holds: \
         not asked past page {pages}"
    )
}

/// What the origins gave.
#[derive(Debug, Default)]
pub struct Sources {
    /// Every envelope given, origin by origin, page by page.
    envelopes: Vec<SourceEnvelope>,
    /// Origins that did not answer, refused or sent an unreadable reply.
    errors: Vec<(String, String)>,
    /// Objects an origin could not give.
    skipped: Vec<(String, PreviewProblem)>,
    /// Origins not asked for all their pages (more than one request holds), and after
    /// how many pages.
    stopped: Vec<(String, usize)>,
    /// Of `envelopes`, how many fit in the preview request (`with_sources`).
    sent: usize,
    /// The bus's `max_payload` they had to fit in.
    max: usize,
}

impl Sources {
    /// Every origin answered every page and left nothing out.
    fn complete(&self) -> bool {
        self.errors.is_empty() && self.skipped.is_empty() && self.stopped.is_empty()
    }

    /// An origin failed: the command exits 2.
    pub fn failed(&self) -> bool {
        !self.errors.is_empty()
    }

    /// The text output's lines, after the sinks' answers.
    pub fn render(&self, out: &mut impl Write) -> std::io::Result<()> {
        for (cluster, e) in &self.errors {
            writeln!(out, "cluster {cluster}: error: preview-source: {e}")?;
        }
        for (cluster, p) in &self.skipped {
            writeln!(
                out,
                "cluster {cluster}: cannot give {} as a source: {}",
                p.object, p.message
            )?;
        }
        for (cluster, pages) in &self.stopped {
            writeln!(out, "note: {}", stopped(cluster, *pages))?;
        }
        if self.sent < self.envelopes.len() {
            writeln!(out, "note: {}", self.not_sent())?;
        }
        Ok(())
    }

    fn not_sent(&self) -> String {
        format!(
            "only {} of the {} source envelopes the origins gave fit in one preview request \
             ({} bytes, the bus's max_payload): the sinks may miss creates",
            self.sent,
            self.envelopes.len(),
            self.max
        )
    }

    /// `-o json|yaml`: origins that failed join `errors`; skipped objects are
    /// `sourcesSkipped`.
    pub fn add_to(&self, data: &mut Value) {
        if let Some(errors) = data.get_mut("errors").and_then(Value::as_array_mut) {
            for (cluster, e) in &self.errors {
                errors.push(json!({"cluster": cluster, "error": format!("preview-source: {e}")}));
            }
        }
        if !self.skipped.is_empty() {
            let skipped: Vec<Value> = self
                .skipped
                .iter()
                .map(|(c, p)| json!({"cluster": c, "object": p.object, "message": p.message}))
                .collect();
            data["sourcesSkipped"] = json!(skipped);
        }
        if self.sent < self.envelopes.len() || !self.stopped.is_empty() {
            let mut notes: Vec<String> = self.stopped.iter().map(|(c, p)| stopped(c, *p)).collect();
            notes.extend((self.sent < self.envelopes.len()).then(|| self.not_sent()));
            data["sourcesNotSent"] = json!(notes);
        }
    }
}

/// One origin's answer: what it gave, what it could not, and after how many pages the
/// CLI stopped asking because more would not fit in a preview request anyway.
struct Answer {
    envelopes: Vec<SourceEnvelope>,
    skipped: Vec<PreviewProblem>,
    stopped_after: Option<usize>,
}

/// Asks every one of `members` for its sources of the candidate `rule`, at once; `max`:
/// the bus's `max_payload`.
pub async fn ask_origins(
    client: &async_nats::Client,
    args: &RulesPreviewArgs,
    rule: &Value,
    members: &[String],
    max: usize,
) -> Sources {
    let asks = members
        .iter()
        .map(|cluster| ask_origin(client, args, rule, cluster, max));
    let answers = futures::future::join_all(asks).await;
    let mut sources = Sources::default();
    for (cluster, answer) in members.iter().zip(answers) {
        match answer {
            Ok(a) => {
                sources.envelopes.extend(a.envelopes);
                sources
                    .skipped
                    .extend(a.skipped.into_iter().map(|p| (cluster.clone(), p)));
                if let Some(pages) = a.stopped_after {
                    sources.stopped.push((cluster.clone(), pages));
                }
            }
            Err(e) => {
                sources.errors.push((cluster.clone(), e));
            }
        }
    }
    sources
}

/// The pages of one origin's answer, until the last, or until what it gave no longer
/// fits in one request of `max` bytes: further pages could not be sent, and a large
/// origin is not made to plan its objects again for each.
async fn ask_origin(
    client: &async_nats::Client,
    args: &RulesPreviewArgs,
    rule: &Value,
    cluster: &str,
    max: usize,
) -> Result<Answer, String> {
    let subject = CommandKey::preview_source(cluster).to_subject(&args.bus.subject_prefix);
    let mut answer = Answer {
        envelopes: Vec::new(),
        skipped: Vec::new(),
        stopped_after: None,
    };
    let (mut after, mut size) = (None, 0);
    for page in 1..=MAX_PAGES {
        let req = PreviewSourceRequest {
            rule: rule.clone(),
            author: args.author.clone(),
            after: after.clone(),
        };
        let payload = req
            .encode()
            .map_err(|e| format!("cannot encode the request: {e}"))?;
        let decode = |b: &[u8]| PreviewSourceReply::decode(b).map_err(|e| e.to_string());
        // Refused for rate (a long answer takes several pages) or busy:
        // asked again when the origin says, a few times.
        let reply = crate::command::request_patiently(
            client,
            (subject.clone(), payload),
            cluster,
            args.timeout,
            decode,
            |r: &PreviewSourceReply| r.error.as_ref().and(r.retry_after_ms),
        )
        .await?;
        if let Some(e) = &reply.error {
            return Err(format!("refused: {e}"));
        }
        own_only(cluster, &args.bus.subject_prefix, &reply.envelopes)?;
        size += reply
            .envelopes
            .iter()
            .map(SourceEnvelope::encoded_len)
            .sum::<usize>();
        answer.envelopes.extend(reply.envelopes);
        answer.skipped.extend(reply.skipped);
        match reply.next {
            None => return Ok(answer),
            // Pages go forward in (namespace, name) order: a token that does
            // not would have the CLI ask for pages it has had, up to
            // MAX_PAGES times.
            Some(next) if !moves_on(after.as_deref(), &next) => {
                return Err(format!(
                    "cluster {cluster} sent a page token that does not move on: {next:?}"
                ));
            }
            Some(_) if size > max => {
                answer.stopped_after = Some(page);
                return Ok(answer);
            }
            Some(next) => after = Some(next),
        }
    }
    Err(format!(
        "cluster {cluster} sent more than {MAX_PAGES} pages"
    ))
}

/// Whether the page token `next` is after `after` (the first page's is after
/// nothing); a token that does not parse never is.
fn moves_on(after: Option<&str>, next: &str) -> bool {
    let Ok(next) = PageToken::parse(next) else {
        return false;
    };
    match after.map(PageToken::parse) {
        None => true,
        Some(Ok(after)) => next > after,
        Some(Err(_)) => false,
    }
}

/// An origin gives only its own objects: an envelope on another cluster's subject (a
/// replayed old version of a peer's object, say) makes the whole answer an error, so
/// that no peer can have the sinks preview another's object as it chooses.
fn own_only(
    cluster: &str,
    prefix: &fleetbus_schemas::subject::Prefix,
    envelopes: &[SourceEnvelope],
) -> Result<(), String> {
    for e in envelopes {
        let origin = ObjectKey::parse_subject(prefix, &e.subject).map(|k| k.origin);
        if origin.as_deref() != Ok(cluster) {
            let shown: String = e.subject.chars().take(200).collect();
            return Err(format!(
                "cluster {cluster} gave an envelope that is not its own: {shown}"
            ));
        }
    }
    Ok(())
}

/// `request` with as many of `sources` as fit in `max` bytes, in the order given, and
/// `sourcesComplete` when every origin gave everything and all of it fits; encoded.
pub fn with_sources(
    request: &mut PreviewRequest,
    sources: &mut Sources,
    max: usize,
) -> Result<Vec<u8>, PreviewError> {
    let encode = |r: &PreviewRequest| {
        r.encode()
            .map_err(|e| PreviewError::Invalid(format!("cannot encode the request: {e}")))
    };
    let mut used = encode(request)?.len() + REQUEST_FRAME;
    let mut all = true;
    for e in &sources.envelopes {
        if used + e.encoded_len() > max {
            all = false;
            continue;
        }
        used += e.encoded_len();
        request.sources.push(e.clone());
    }
    request.sources_complete = sources.complete() && all;
    (sources.sent, sources.max) = (request.sources.len(), max);
    encode(request)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn envelope(n: usize) -> SourceEnvelope {
        SourceEnvelope::new(
            format!("fleetbus.obj.c1.core.v1.Secret.a.s{n}"),
            &vec![7; 3000],
        )
    }

    fn sources(n: usize, complete: bool) -> Sources {
        Sources {
            envelopes: (0..n).map(envelope).collect(),
            // An origin that did not answer makes the sources incomplete.
            errors: if complete {
                Vec::new()
            } else {
                vec![("c9".to_owned(), "no answer".to_owned())]
            },
            ..Sources::default()
        }
    }

    #[test]
    fn what_fits_goes_and_only_all_of_a_complete_answer_is_complete() {
        let req = || PreviewRequest {
            rule_name: Some("web".into()),
            ..PreviewRequest::default()
        };
        let mut r = req();
        let bytes = with_sources(&mut r, &mut sources(10, true), 1 << 20).unwrap();
        assert_eq!(r.sources.len(), 10);
        assert!(r.sources_complete);
        assert_eq!(PreviewRequest::decode(&bytes).unwrap(), r);
        // 10 envelopes of 4 KB in base64 do not fit in 20,000 bytes.
        let mut r = req();
        let bytes = with_sources(&mut r, &mut sources(10, true), 20_000).unwrap();
        assert!(bytes.len() + REQUEST_FRAME <= 20_000, "{}", bytes.len());
        assert!(!r.sources.is_empty() && r.sources.len() < 10);
        assert!(!r.sources_complete);
        let mut s = sources(10, true);
        with_sources(&mut req(), &mut s, 20_000).unwrap();
        let mut text = Vec::new();
        s.render(&mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains(" of the 10 source envelopes"), "{text}");
        // An origin that did not answer, or skipped some: never complete.
        let mut r = req();
        with_sources(&mut r, &mut sources(1, false), 1 << 20).unwrap();
        assert_eq!((r.sources.len(), r.sources_complete), (1, false));
    }

    #[test]
    fn an_origin_gives_only_its_own_objects() {
        let p = fleetbus_schemas::subject::Prefix::default();
        let own = |origin: &str| {
            let key = ObjectKey::from_api_version(origin, "v1", "Secret", Some("a"), "s");
            SourceEnvelope::new(key.to_subject(&p), b"e")
        };
        assert_eq!(own_only("c1", &p, &[own("c1"), own("c1")]), Ok(()));
        let e = own_only("c3", &p, &[own("c3"), own("c1")]).unwrap_err();
        assert!(
            e.contains("cluster c3 gave an envelope that is not its own"),
            "{e}"
        );
        let garbage = SourceEnvelope::new("not.a.subject".into(), b"e");
        assert!(own_only("c1", &p, &[garbage]).is_err());
    }

    #[test]
    fn failed_origins_are_named_and_make_it_fail() {
        let mut s = sources(0, true);
        assert!(!s.failed());
        s.errors
            .push(("c3".into(), "no agent answers for cluster c3".into()));
        assert!(s.failed());
        let mut text = Vec::new();
        s.render(&mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains("cluster c3: error: preview-source: no agent answers"),
            "{text}"
        );
        let mut data = json!({"clusters": [], "errors": []});
        s.add_to(&mut data);
        assert_eq!(data["errors"][0]["cluster"], "c3");
    }

    #[test]
    fn page_tokens_must_move_on() {
        assert!(moves_on(None, "a/x"));
        assert!(moves_on(Some("a/x"), "a/y"));
        assert!(moves_on(Some("a/x"), "b/a"));
        assert!(!moves_on(Some("a/y"), "a/y"), "the same page again");
        assert!(!moves_on(Some("b/a"), "a/z"), "back to an earlier page");
        assert!(!moves_on(None, ""), "a token that does not parse");
    }

    /// Origin c1 as a plain subscriber: it refuses `refusals` requests for
    /// rate (ask again in 50 ms), then answers an empty last page.
    async fn stub_origin(
        client: async_nats::Client,
        refusals: usize,
    ) -> tokio::task::JoinHandle<()> {
        use futures::StreamExt;
        let subject = CommandKey::preview_source("c1")
            .to_subject(&fleetbus_schemas::subject::Prefix::default());
        let mut sub = client.subscribe(subject).await.unwrap();
        client.flush().await.unwrap();
        tokio::spawn(async move {
            let mut n = 0;
            while let Some(msg) = sub.next().await {
                let reply = if n < refusals {
                    PreviewSourceReply {
                        retry_after_ms: Some(50),
                        ..PreviewSourceReply::refused("c1", "rate limited")
                    }
                } else {
                    PreviewSourceReply {
                        cluster: "c1".into(),
                        ..PreviewSourceReply::default()
                    }
                };
                n += 1;
                let to = msg.reply.unwrap();
                client
                    .publish(to, reply.encode().unwrap().into())
                    .await
                    .unwrap();
            }
        })
    }

    /// An origin that refuses a page for rate, saying when to ask again, is
    /// asked again then (a few times); one that keeps refusing fails. Against
    /// a real nats-server, the origin a plain subscriber.
    #[tokio::test]
    async fn a_page_refused_for_rate_is_asked_again_when_the_origin_says() {
        use clap::Parser;
        let nats = fleetbus_testsupport::NatsServer::start().unwrap();
        let client = async_nats::connect(nats.url()).await.unwrap();
        let cli = crate::cli::Cli::try_parse_from([
            "fleetbus",
            "rules",
            "preview",
            "-f",
            "rule.yaml",
            "--nats-url",
            &nats.url(),
            "--timeout",
            "5s",
        ])
        .unwrap();
        let crate::cli::Command::Rules(crate::cli::RulesCommand::Preview(args)) = cli.command
        else {
            panic!("not rules preview");
        };
        let rule = json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "ResourceSyncRule"});
        let patient = stub_origin(client.clone(), crate::command::RATE_WAITS as usize).await;
        let answer = ask_origin(&client, &args, &rule, "c1", 1 << 20).await;
        assert!(answer.is_ok(), "{:?}", answer.err());
        patient.abort();
        let _ = patient.await;
        let _stubborn = stub_origin(client.clone(), crate::command::RATE_WAITS as usize + 1).await;
        let answer = ask_origin(&client, &args, &rule, "c1", 1 << 20).await;
        let Err(e) = answer else {
            panic!("a stubborn refusal was taken");
        };
        assert!(e.contains("rate limited"), "{e}");
    }
}
