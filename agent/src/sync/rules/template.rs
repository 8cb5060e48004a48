//! Override value templates: minijinja, strict, bounded, over the object, both clusters
//! and the sink's own values (`valuesFrom`).
//!
//! The CRD documents Go-template style roots (`{{ .Object.metadata.name }}`); minijinja
//! has no leading-dot syntax, so [`go_style_roots`] drops the dot before the four
//! roots inside tags and minijinja parses the rest. Nothing else of Go templates is
//! emulated.

use std::borrow::Cow;

use minijinja::value::Serde;
use minijinja::value::ValueKind;
use minijinja::{context, AutoEscape, Environment, ErrorKind, UndefinedBehavior};
use serde_json::Value;

/// Largest rendered value accepted, in bytes (a copy must still fit an etcd object).
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// minijinja fuel per render: roughly instructions, and about 64 bytes of allocation
/// per unit (see `Environment::set_fuel`), so a loop or a string blow-up stops after
/// a few MB and a few milliseconds.
const FUEL: u64 = 50_000;
/// Nesting limit of a render; override values need very little.
const RECURSION_LIMIT: usize = 64;

/// The roots a template can read. `object` is the source object from the envelope;
/// `cluster` is the origin cluster's registry record (`ClusterRecord` as JSON: `name`,
/// `labels`, `metadata`, `features`, ...); `local_cluster` is this (sink) cluster's.
/// Templates see each record through [`cluster_view`], so the Cluster-object paths
/// `metadata.name` and `metadata.labels` work too.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TemplateContext {
    /// The source object (`Object` / `.Object`).
    pub object: Value,
    /// The origin cluster's record (`Cluster` / `.Cluster`).
    pub cluster: Value,
    /// The sink cluster's record (`LocalCluster` / `.LocalCluster`).
    pub local_cluster: Value,
    /// The merged `data` of the rule's `valuesFrom` ConfigMaps on the sink
    /// (`Values` / `.Values`; an empty object without any).
    pub values: Value,
    /// What placement says of this copy (`Placement` / `.Placement`:
    /// `index` among the chosen clusters by name from 0, `count`, and
    /// `share` when it divides replicas); null without placement.
    pub placement: Value,
}

/// A template that does not compile or render.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The template does not parse.
    #[error("template does not compile")]
    Syntax(#[source] minijinja::Error),
    /// The template reads a field that does not exist (undefined values are errors).
    #[error("template refers to an undefined value")]
    Undefined(#[source] minijinja::Error),
    /// The template spent its fuel: too much work or memory.
    #[error("template exceeded its evaluation budget")]
    Exhausted(#[source] minijinja::Error),
    /// Any other failure while rendering (unknown filter, type error, ...).
    #[error("template failed to render")]
    Render(#[source] minijinja::Error),
    /// The rendered text is larger than [`MAX_OUTPUT_BYTES`].
    #[error("rendered value is {len} bytes, more than the {limit} allowed")]
    OutputTooLarge {
        /// Bytes rendered.
        len: usize,
        /// The limit.
        limit: usize,
    },
}

impl TemplateError {
    fn from_render(e: minijinja::Error) -> Self {
        match e.kind() {
            ErrorKind::UndefinedError => TemplateError::Undefined(e),
            ErrorKind::OutOfFuel => TemplateError::Exhausted(e),
            ErrorKind::SyntaxError => TemplateError::Syntax(e),
            _ => TemplateError::Render(e),
        }
    }
}

/// A text with none of `{{`, `{%`, `{#` is a literal: nothing to compile.
fn is_literal(src: &str) -> bool {
    !(src.contains("{{") || src.contains("{%") || src.contains("{#"))
}

/// A fresh environment per call: no loader (so no includes or imports can reach
/// anything), strict undefined, no auto-escaping, fuel and recursion bounded.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(RECURSION_LIMIT);
    env.set_formatter(json_formatter);
    env
}

/// Prints values the way a JSON field wants them: strings and numbers as text, but
/// booleans as `true`/`false` (Jinja says `True`), none as `null` and lists and maps as
/// JSON, so `{{ .Object.spec.suspend }}` or `{{ .Object.spec.selector }}` copy a field
/// with its type. A custom formatter bypasses minijinja's strict check on printing,
/// so it refuses undefined values itself (including the silent undefined of an `if`
/// without `else`: write `else ''`).
fn json_formatter(
    out: &mut minijinja::Output<'_>,
    state: &mut minijinja::State<'_, '_>,
    value: &minijinja::Value,
) -> Result<(), minijinja::Error> {
    match value.kind() {
        ValueKind::Undefined => Err(minijinja::Error::new(
            ErrorKind::UndefinedError,
            "cannot print an undefined value",
        )),
        ValueKind::Bool | ValueKind::None | ValueKind::Seq | ValueKind::Map => {
            let json = serde_json::to_string(value).map_err(|e| {
                minijinja::Error::new(ErrorKind::BadSerialization, "value is not JSON")
                    .with_source(e)
            })?;
            out.write_str(&json).map_err(|e| {
                minijinja::Error::new(ErrorKind::WriteFailure, "write failed").with_source(e)
            })
        }
        _ => minijinja::escape_formatter(out, state, value),
    }
}

/// Checks that `src` compiles (syntax only; undefined fields show up at render time).
pub fn check(src: &str) -> Result<(), TemplateError> {
    if is_literal(src) {
        return Ok(());
    }
    let src = go_style_roots(src);
    let env = environment();
    env.template_from_str(&src)
        .map(|_| ())
        .map_err(TemplateError::Syntax)
}

/// One override value of a rule that does not compile, with the field it sits at.
#[cfg(test)]
#[derive(Debug, thiserror::Error)]
#[error("{field}: invalid template")]
pub struct SpecTemplateError {
    /// Field path, e.g. `spec.rules[0].mutations.overrides[1].value`.
    pub field: String,
    /// Why it does not compile.
    #[source]
    pub error: TemplateError,
}

/// Compiles every override value of `spec` (what marks a rule `Invalid`, reason
/// "bad template"); returns every failure, in spec order.
#[cfg(test)]
pub fn check_spec(
    spec: &fleetbus_schemas::crd::ResourceSyncRuleSpec,
) -> Result<(), Vec<SpecTemplateError>> {
    let mut errors = Vec::new();
    for (i, rule) in spec.rules.iter().enumerate() {
        let Some(m) = &rule.mutations else { continue };
        for (j, o) in m.overrides.iter().enumerate() {
            let Some(src) = &o.value else { continue };
            if let Err(error) = check(src) {
                errors.push(SpecTemplateError {
                    field: format!("spec.rules[{i}].mutations.overrides[{j}].value"),
                    error,
                });
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Renders `src` against `ctx`. The output is parsed as JSON if it parses (`"3"` gives
/// the number 3, `{"a":1}` an object), else it is a JSON string.
pub fn render(src: &str, ctx: &TemplateContext) -> Result<Value, TemplateError> {
    let text = if is_literal(src) {
        Cow::Borrowed(src)
    } else {
        let src = go_style_roots(src);
        let env = environment();
        let template = env.template_from_str(&src).map_err(TemplateError::Syntax)?;
        let out = template
            .render(context! {
                Object => minijinja::Value::from(Serde(&ctx.object)),
                Cluster => minijinja::Value::from(Serde(&cluster_view(&ctx.cluster))),
                LocalCluster => minijinja::Value::from(Serde(&cluster_view(&ctx.local_cluster))),
                Values => minijinja::Value::from(Serde(&ctx.values)),
                Placement => minijinja::Value::from(Serde(&ctx.placement)),
            })
            .map_err(TemplateError::from_render)?;
        Cow::Owned(out)
    };
    if text.len() > MAX_OUTPUT_BYTES {
        return Err(TemplateError::OutputTooLarge {
            len: text.len(),
            limit: MAX_OUTPUT_BYTES,
        });
    }
    Ok(serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.into_owned())))
}

/// A registry record as templates see it. The CRD documents `.Cluster` as "the origin
/// Cluster", so rule authors write Cluster-object paths (`.Cluster.metadata.name`,
/// `.Cluster.metadata.labels.region`); the record has `name` and `labels` at the top
/// and uses `metadata` for node facts (provider, versions, locality). The view adds
/// `name` and `labels` into `metadata` (never replacing a key already there), so both
/// spellings work. Anything that is not a record-shaped object is passed unchanged.
pub fn cluster_view(record: &Value) -> Value {
    let mut view = record.clone();
    let Some(top) = view.as_object_mut() else {
        return view;
    };
    let extra: Vec<(&str, Value)> = ["name", "labels"]
        .into_iter()
        .filter_map(|k| Some((k, top.get(k)?.clone())))
        .collect();
    if extra.is_empty() {
        return view;
    }
    let meta = top
        .entry("metadata")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if let Value::Object(meta) = meta {
        for (k, v) in extra {
            meta.entry(k).or_insert(v);
        }
    }
    view
}

const ROOTS: [&str; 5] = ["Object", "Cluster", "LocalCluster", "Values", "Placement"];

/// Rewrites `.Object`, `.Cluster`, `.LocalCluster` and `.Values` to the bare root inside `{{ }}`
/// and `{% %}` tags, where the dot starts an expression (not after an identifier, `)`,
/// `]` or another dot, so `a.Cluster` stays an attribute) and is outside string literals.
pub fn go_style_roots(src: &str) -> Cow<'_, str> {
    if !ROOTS.iter().any(|root| src.contains(&format!(".{root}"))) {
        return Cow::Borrowed(src);
    }
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut in_tag = false;
    let mut quote: Option<u8> = None;
    let mut prev: u8 = b' ';
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if !in_tag {
            if c == b'{' && matches!(next, Some(b'{' | b'%')) {
                in_tag = true;
                prev = b' ';
                out.push_str(&src[i..i + 2]);
                i += 2;
                continue;
            }
        } else if let Some(q) = quote {
            if c == b'\\' {
                // Keep the escaped character (whole, it may be multi-byte) with its backslash.
                let end = (i + 1 + b.get(i + 1).map_or(0, |&n| utf8_len(n))).min(b.len());
                out.push_str(&src[i..end]);
                i = end;
                continue;
            }
            if c == q {
                quote = None;
            }
        } else if c == b'"' || c == b'\'' {
            quote = Some(c);
        } else if matches!(c, b'}' | b'%') && next == Some(b'}') {
            in_tag = false;
        } else if c == b'.' && !is_ident_end(prev) && starts_root(&src[i + 1..]) {
            prev = c;
            i += 1;
            continue;
        }
        // Byte-wise copy is fine: every byte matched above is ASCII, so `i` stays on a
        // character boundary when the whole character is copied here.
        let len = utf8_len(c);
        let end = (i + len).min(b.len());
        out.push_str(&src[i..end]);
        prev = c;
        i = end;
    }
    Cow::Owned(out)
}

fn is_ident_end(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b')' | b']' | b'.')
}

fn starts_root(rest: &str) -> bool {
    ROOTS.iter().any(|root| {
        rest.strip_prefix(root).is_some_and(|after| {
            !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        })
    })
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::crd::ResourceSyncRuleSpec;
    use proptest::prelude::*;
    use serde_json::json;
    use std::time::{Duration, Instant};

    fn ctx() -> TemplateContext {
        TemplateContext {
            object: json!({"metadata": {"name": "web", "namespace": "team-a",
                "labels": {"app": "web", "example.com/tier": "fe"}},
                "spec": {"replicas": 3}}),
            cluster: json!({"name": "east", "labels": {"region": "us-east-1"}}),
            local_cluster: json!({"name": "west", "labels": {"region": "us-west-2"}}),
            values: json!({"registry": "registry.eu.example.com"}),
            placement: json!({"index": 1, "count": 3, "share": 4}),
        }
    }

    #[test]
    fn placement_is_a_root_too() {
        assert_eq!(
            render(
                "shard-{{ .Placement.index }}-of-{{ .Placement.count }}",
                &ctx()
            )
            .unwrap(),
            json!("shard-1-of-3")
        );
        assert_eq!(render("{{ Placement.share }}", &ctx()).unwrap(), json!(4));
        // Without placement the root is null: reading into it is an error.
        let none = TemplateContext {
            placement: Value::Null,
            ..ctx()
        };
        assert!(render("{{ .Placement.index }}", &none).is_err());
    }

    #[test]
    fn values_are_a_root_too() {
        assert_eq!(
            render("{{ .Values.registry }}/app:1", &ctx()).unwrap(),
            json!("registry.eu.example.com/app:1")
        );
        assert_eq!(
            render("{{ Values.registry }}", &ctx()).unwrap(),
            json!("registry.eu.example.com")
        );
        // Strict: a key the sink's ConfigMaps do not have is an error, not "".
        assert!(render("{{ .Values.missing }}", &ctx()).is_err());
    }

    #[test]
    fn both_syntaxes_render_the_same() {
        for src in [
            "{{ .Object.metadata.name }}-{{ .Cluster.name }}",
            "{{ Object.metadata.name }}-{{ Cluster.name }}",
            "{{.Object.metadata.name}}-{{.Cluster.name}}",
            "{{- .Object.metadata.name -}}-{{ .Cluster['name'] }}",
        ] {
            assert_eq!(render(src, &ctx()).unwrap(), json!("web-east"), "{src}");
        }
        assert_eq!(
            render("{{ .LocalCluster.labels.region }}", &ctx()).unwrap(),
            json!("us-west-2")
        );
        assert_eq!(
            render(
                "{{ .Object.metadata.labels['example.com/tier'] | upper }}",
                &ctx()
            )
            .unwrap(),
            json!("FE")
        );
        assert_eq!(
            render(
                "{% if .Cluster.name == 'east' %}e{% else %}o{% endif %}",
                &ctx()
            )
            .unwrap(),
            json!("e")
        );
    }

    #[test]
    fn clusters_read_like_cluster_objects_too() {
        let mut c = ctx();
        c.cluster["metadata"] = json!({"provider": "aws", "locality": {"region": "us-east-1"}});
        for (src, want) in [
            ("{{ .Cluster.metadata.name }}", json!("east")),
            ("{{ .Cluster.name }}", json!("east")),
            ("{{ .Cluster.metadata.labels.region }}", json!("us-east-1")),
            ("{{ .Cluster.metadata.provider }}", json!("aws")),
            (
                "{{ .Cluster.metadata.locality.region }}",
                json!("us-east-1"),
            ),
            ("{{ .LocalCluster.metadata.name }}", json!("west")),
        ] {
            assert_eq!(render(src, &c).unwrap(), want, "{src}");
        }
        // A key the record already has in metadata is not replaced; non-objects pass.
        let r = json!({"name": "a", "metadata": {"name": "kept"}});
        assert_eq!(cluster_view(&r)["metadata"]["name"], "kept");
        assert_eq!(cluster_view(&Value::Null), Value::Null);
        assert_eq!(cluster_view(&json!({"x": 1})), json!({"x": 1}));
    }

    #[test]
    fn rewrite_is_limited_to_expression_roots() {
        assert_eq!(go_style_roots("{{ .Object.a }}"), "{{ Object.a }}");
        assert_eq!(
            go_style_roots("{{ x | default(.Cluster.name) }}"),
            "{{ x | default(Cluster.name) }}"
        );
        // Outside tags, in strings, after an identifier, or a longer name: untouched.
        assert_eq!(go_style_roots("a.Object {{ 1 }}"), "a.Object {{ 1 }}");
        assert_eq!(go_style_roots("{{ '.Object' }}"), "{{ '.Object' }}");
        assert_eq!(
            go_style_roots(r#"{{ "a\".Object" }}"#),
            r#"{{ "a\".Object" }}"#
        );
        assert_eq!(
            go_style_roots("{{ Object.Cluster }}"),
            "{{ Object.Cluster }}"
        );
        assert_eq!(go_style_roots("{{ .Objects }}"), "{{ .Objects }}");
        assert_eq!(go_style_roots("{{ a }}.Object"), "{{ a }}.Object");
        assert_eq!(go_style_roots("ü{{ .Cluster.ä }}"), "ü{{ Cluster.ä }}");
        assert_eq!(
            go_style_roots(r#"{{ "\ü" ~ .Object.a }}"#),
            r#"{{ "\ü" ~ Object.a }}"#
        );
    }

    #[test]
    fn output_is_json_when_it_parses() {
        assert_eq!(
            render("{{ .Object.spec.replicas }}", &ctx()).unwrap(),
            json!(3)
        );
        assert_eq!(
            render("{{ .Object.spec.replicas > 2 }}", &ctx()).unwrap(),
            json!(true)
        );
        assert_eq!(
            render("{{ .Object.metadata.labels | tojson }}", &ctx()).unwrap(),
            json!({"app": "web", "example.com/tier": "fe"})
        );
        assert_eq!(
            render(r#"{"app": "{{ .Object.metadata.name }}"}"#, &ctx()).unwrap(),
            json!({"app": "web"})
        );
        assert_eq!(render("web-{{ 1 + 1 }}", &ctx()).unwrap(), json!("web-2"));
        assert_eq!(render("{{ '' }}", &ctx()).unwrap(), json!(""));
        // Typed values print as JSON, so a field is copied with its type.
        assert_eq!(render("{{ none }}", &ctx()).unwrap(), Value::Null);
        assert_eq!(
            render("{{ [1, 'a', true] }}", &ctx()).unwrap(),
            json!([1, "a", true])
        );
        assert_eq!(
            render("{{ .Object.metadata.labels }}", &ctx()).unwrap(),
            json!({"app": "web", "example.com/tier": "fe"})
        );
        assert_eq!(render("x-{{ false }}", &ctx()).unwrap(), json!("x-false"));
        assert_eq!(render("{{ 2.5 }}", &ctx()).unwrap(), json!(2.5));
    }

    #[test]
    fn literals_are_returned_as_is() {
        assert_eq!(render("plain text", &ctx()).unwrap(), json!("plain text"));
        assert_eq!(render("42", &ctx()).unwrap(), json!(42));
        assert_eq!(render("[1, 2]", &ctx()).unwrap(), json!([1, 2]));
        assert_eq!(
            render(r#"{"a":{"b":1}}"#, &ctx()).unwrap(),
            json!({"a": {"b": 1}})
        );
        // A literal is not compiled, so minijinja syntax in it cannot fail.
        assert_eq!(render("a }} b", &ctx()).unwrap(), json!("a }} b"));
        assert!(check("a }} b").is_ok());
    }

    #[test]
    fn missing_fields_are_errors() {
        for src in [
            "{{ .Object.metadata.nope }}",
            "{{ .Object.nope.deeper }}",
            "{{ Nope }}",
            "x-{{ .Cluster.labels.zone }}",
            "{{ 'a' if false }}",
        ] {
            assert!(
                matches!(render(src, &ctx()), Err(TemplateError::Undefined(_))),
                "{src}: {:?}",
                render(src, &ctx())
            );
        }
        // `is defined` and `default` still allow optional fields.
        assert_eq!(
            render("{{ .Cluster.labels.zone | default('none') }}", &ctx()).unwrap(),
            json!("none")
        );
    }

    #[test]
    fn syntax_errors() {
        for src in [
            "{{ .Object.metadata.name ",
            "{{ }}",
            "{% if %}",
            "{{ a b }}",
            "{% for x in y %}",
        ] {
            assert!(matches!(check(src), Err(TemplateError::Syntax(_))), "{src}");
            assert!(
                matches!(render(src, &ctx()), Err(TemplateError::Syntax(_))),
                "{src}"
            );
        }
        assert!(check("{{ .Object.metadata.name }}").is_ok());
        assert!(check("{{ Object.whatever.is.unknown.until.render }}").is_ok());
        assert!(matches!(
            render("{{ 1 | nosuchfilter }}", &ctx()),
            Err(TemplateError::Render(_)) | Err(TemplateError::Syntax(_))
        ));
    }

    #[test]
    fn check_spec_names_each_bad_value() {
        use fleetbus_schemas::crd::{Mutations, Override, OverrideType, SyncRule};
        let o = |v: &str| Override {
            type_: OverrideType::Replace,
            path: "/x".into(),
            value: Some(v.into()),
        };
        let rule = |vals: &[&str]| SyncRule {
            match_: vec![],
            mutations: Some(Mutations {
                overrides: vals.iter().map(|v| o(v)).collect(),
                ..Default::default()
            }),
        };
        let mut spec = ResourceSyncRuleSpec {
            rules: vec![
                rule(&["{{ .Object.a }}", "plain"]),
                SyncRule::default(),
                rule(&["ok", "{{ .Object.a", "{% if %}"]),
            ],
            ..Default::default()
        };
        let fields: Vec<String> = check_spec(&spec)
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.rules[2].mutations.overrides[1].value",
                "spec.rules[2].mutations.overrides[2].value"
            ]
        );
        spec.rules.truncate(2);
        assert!(check_spec(&spec).is_ok());
    }

    #[test]
    fn tojson_forces_a_string() {
        let mut c = ctx();
        c.object["metadata"]["name"] = json!("123");
        assert_eq!(
            render("{{ .Object.metadata.name }}", &c).unwrap(),
            json!(123)
        );
        assert_eq!(
            render("{{ .Object.metadata.name | tojson }}", &c).unwrap(),
            json!("123")
        );
    }

    #[test]
    fn deep_nesting_is_a_syntax_error_not_a_crash() {
        let src = format!("{{{{ {}1{} }}}}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(matches!(check(&src), Err(TemplateError::Syntax(_))));
        let src = format!(
            "{}x{}",
            "{% if true %}".repeat(2_000),
            "{% endif %}".repeat(2_000)
        );
        assert!(render(&src, &ctx()).is_err());
    }

    #[test]
    fn no_loader_so_no_includes() {
        assert!(render("{% include 'x' %}", &ctx()).is_err());
        assert!(render("{% import 'x' as y %}", &ctx()).is_err());
    }

    #[test]
    fn hostile_templates_are_bounded() {
        let hostile = [
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            "{{ 'x' * 1000000000 }}",
            "{% for i in range(100000) %}{{ i }}{% endfor %}",
            "{% set s = namespace(v='x') %}{% for i in range(64) %}{% set s.v = s.v ~ s.v %}{% endfor %}{{ s.v }}",
        ];
        for src in hostile {
            let start = Instant::now();
            let got = render(src, &ctx());
            assert!(
                matches!(
                    got,
                    Err(TemplateError::Exhausted(_)) | Err(TemplateError::OutputTooLarge { .. })
                ),
                "{src}: {got:?}"
            );
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "{src} took {:?}",
                start.elapsed()
            );
        }
    }

    #[test]
    fn large_output_is_refused() {
        let src = format!("{}{{{{ 1 }}}}", "a".repeat(MAX_OUTPUT_BYTES));
        assert!(matches!(
            render(&src, &ctx()),
            Err(TemplateError::OutputTooLarge { .. }) | Err(TemplateError::Exhausted(_))
        ));
        let literal = "b".repeat(MAX_OUTPUT_BYTES + 1);
        assert!(matches!(
            render(&literal, &ctx()),
            Err(TemplateError::OutputTooLarge { len, .. }) if len == MAX_OUTPUT_BYTES + 1
        ));
    }

    proptest! {
        #[test]
        fn text_without_tags_is_unchanged(s in "[^{}]*") {
            let got = render(&s, &TemplateContext::default()).unwrap();
            let expected = serde_json::from_str(&s).unwrap_or(Value::String(s.clone()));
            prop_assert_eq!(got, expected);
            prop_assert_eq!(go_style_roots(&s), s.as_str());
        }

        #[test]
        fn rewrite_is_idempotent_and_both_spellings_agree(
            pieces in proptest::collection::vec(
                prop_oneof![
                    Just("{{ .Object.metadata.name }}"),
                    Just("{{ Object.metadata.name }}"),
                    Just("{{ .Cluster.labels.region ~ '.Object' }}"),
                    Just("{% if .LocalCluster.name %}y{% endif %}"),
                    Just("a.Object"),
                    Just("-"),
                    Just("ü"),
                ],
                0..6,
            ),
        ) {
            let src: String = pieces.concat();
            let once = go_style_roots(&src).into_owned();
            prop_assert_eq!(go_style_roots(&once), once.as_str());
            prop_assert_eq!(render(&src, &ctx()).ok(), render(&once, &ctx()).ok());
            prop_assert!(render(&src, &ctx()).is_ok(), "{}", src);
        }

        #[test]
        fn names_render_verbatim(name in "[a-z][a-z0-9-]{0,20}[a-z]") {
            // These three parse as JSON literals: the documented JSON-first rule.
            prop_assume!(!["true", "false", "null"].contains(&name.as_str()));
            let mut c = ctx();
            c.object["metadata"]["name"] = json!(name.clone());
            let got = render("{{ .Object.metadata.name }}", &c).unwrap();
            prop_assert_eq!(got, json!(name));
        }
    }
}
