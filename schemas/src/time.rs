//! RFC 3339 timestamps with millisecond precision, as used on the wire.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serializer};

/// Formats a timestamp as RFC 3339 UTC with milliseconds: `2026-11-22T04:30:00.123Z`.
pub fn format_rfc3339_ms(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Parses any RFC 3339 timestamp into UTC.
pub fn parse_rfc3339(s: &str) -> Result<DateTime<Utc>, chrono::ParseError> {
    DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc))
}

/// Truncates to whole milliseconds: what survives a round trip through the wire format.
pub fn truncate_to_ms(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
}

/// `#[serde(with = "rfc3339_ms")]` for `DateTime<Utc>`.
pub(crate) mod rfc3339_ms {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_rfc3339_ms(t))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let s = String::deserialize(d)?;
        parse_rfc3339(&s).map_err(serde::de::Error::custom)
    }
}

/// `#[serde(with = "rfc3339_ms_opt")]` for `Option<DateTime<Utc>>` (null when absent).
pub(crate) mod rfc3339_ms_opt {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        t: &Option<DateTime<Utc>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_some(&format_rfc3339_ms(t)),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<DateTime<Utc>>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|s| parse_rfc3339(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// `#[serde(with = "rfc3339_ms_map")]` for a `BTreeMap<String, DateTime<Utc>>`
/// (a JSON object of timestamps, as a rollout record's `admittedAt`).
pub(crate) mod rfc3339_ms_map {
    use std::collections::BTreeMap;

    use super::*;
    use serde::ser::SerializeMap;

    pub(crate) fn serialize<S: Serializer>(
        m: &BTreeMap<String, DateTime<Utc>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(m.len()))?;
        for (k, t) in m {
            map.serialize_entry(k, &format_rfc3339_ms(t))?;
        }
        map.end()
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, DateTime<Utc>>, D::Error> {
        BTreeMap::<String, String>::deserialize(d)?
            .into_iter()
            .map(|(k, s)| Ok((k, parse_rfc3339(&s).map_err(serde::de::Error::custom)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_millis_and_z() {
        let t = parse_rfc3339("2026-11-22T05:30:00.123456+01:00").unwrap();
        assert_eq!(format_rfc3339_ms(&t), "2026-11-22T04:30:00.123Z");
        assert_eq!(
            format_rfc3339_ms(&truncate_to_ms(t)),
            "2026-11-22T04:30:00.123Z"
        );
        assert!(parse_rfc3339("yesterday").is_err());
    }
}
