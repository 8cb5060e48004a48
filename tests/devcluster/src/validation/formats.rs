//! The OpenAPI string `format`s kube-apiserver checks in custom resources
//! (kube-openapi's strfmt registry); unknown formats are accepted, as in kube.

use base64::Engine;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `s` is a valid value of `format`.
pub fn is_valid(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => chrono::DateTime::parse_from_rfc3339(s).is_ok(),
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok(),
        "uuid" | "uuid3" | "uuid4" | "uuid5" => is_uuid(format, s),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "hostname" => is_hostname(s),
        "email" => is_email(s),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "bsonobjectid" => s.len() == 24 && s.chars().all(|c| c.is_ascii_hexdigit()),
        "hexcolor" => s.strip_prefix('#').is_some_and(|h| {
            (h.len() == 3 || h.len() == 6) && h.chars().all(|c| c.is_ascii_hexdigit())
        }),
        "uri" => url::Url::parse(s).is_ok(),
        "duration" => is_duration(s),
        _ => true,
    }
}

fn is_uuid(format: &str, s: &str) -> bool {
    let Ok(u) = uuid::Uuid::parse_str(s) else {
        return false;
    };
    // strfmt wants the hyphenated form.
    if s.len() != 36 {
        return false;
    }
    match format {
        "uuid3" => u.get_version_num() == 3,
        "uuid4" => u.get_version_num() == 4,
        "uuid5" => u.get_version_num() == 5,
        _ => true,
    }
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => bits <= 32,
        Ok(IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    matches!(parts.len(), 6 | 8 | 20)
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

fn is_email(s: &str) -> bool {
    match s.rsplit_once('@') {
        Some((local, domain)) => !local.is_empty() && !domain.is_empty() && !s.contains(' '),
        None => false,
    }
}

/// Go `time.ParseDuration` style (`1h30m`, `250ms`) or strfmt's `3 days`.
fn is_duration(s: &str) -> bool {
    let s = s.trim();
    if s.is_empty() {
        return false;
    }
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    let units = [
        "ns", "us", "µs", "ms", "s", "m", "h", "d", "w", "y", "sec", "min", "hour", "hours", "day",
        "days", "week", "weeks", "second", "seconds", "minute", "minutes",
    ];
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return false;
        }
        rest = rest[num_len..].trim_start();
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = rest[..unit_len].trim();
        if !units.contains(&unit) {
            return false;
        }
        rest = &rest[unit_len..];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::is_valid;

    #[test]
    fn formats_kube_checks() {
        for (f, ok, bad) in [
            ("date-time", "2024-01-02T03:04:05Z", "2024-01-02"),
            ("date", "2024-01-02", "02/01/2024"),
            ("uuid", "0b3c1a4e-8f5d-4c2a-9e7b-1d2f3a4b5c6d", "xyz"),
            ("ipv4", "10.0.0.1", "10.0.0.256"),
            ("ipv6", "::1", "10.0.0.1"),
            ("cidr", "10.0.0.0/8", "10.0.0.0/33"),
            ("mac", "aa:bb:cc:dd:ee:ff", "aa:bb"),
            ("hostname", "a.example.com", "-a.com"),
            ("email", "a@b.c", "ab.c"),
            ("byte", "aGk=", "!!"),
            ("duration", "1h30m", "soon"),
            ("unknown-format", "anything", ""),
        ] {
            assert!(is_valid(f, ok), "{f} {ok}");
            if f != "unknown-format" {
                assert!(!is_valid(f, bad), "{f} {bad}");
            }
        }
    }
}
