//! Who may use the dashboard: the listen policy (loopback, or a token), the token
//! check (bearer header, or the cookie a `/?token=` login sets) and, without a token,
//! the Host check that keeps a web page elsewhere from reaching a loopback dashboard
//! through DNS rebinding. The decisions are pure functions; [`guard`] applies them.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use super::error::{ApiError, DashboardError};
use super::AppState;

/// Name of the login cookie.
pub(crate) const COOKIE: &str = "fleetbus_token";

/// The token the server requires, checked at start: `None` is allowed only on loopback.
pub(crate) fn check_listen(
    addr: SocketAddr,
    token: Option<&str>,
) -> Result<Option<String>, DashboardError> {
    match token {
        None if addr.ip().is_loopback() => Ok(None),
        None => Err(DashboardError::TokenRequired(addr)),
        Some(t) if token_is_safe(t) => Ok(Some(t.to_owned())),
        Some(_) => Err(DashboardError::BadToken),
    }
}

/// A token must go into a header and a cookie value unchanged.
fn token_is_safe(t: &str) -> bool {
    (1..=512).contains(&t.len())
        && t.bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b';' | b',' | b'"' | b'\\'))
}

/// Equal in time independent of where they differ (a token compared byte by byte
/// with an early exit leaks its prefix through timing).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Does the request carry `token`, as `Authorization: Bearer` or as the cookie?
pub(crate) fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let bearer = headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.strip_prefix("Bearer "))
        .any(|t| same(t.trim().as_bytes(), token.as_bytes()));
    bearer
        || headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
            .any(|t| same(t.as_bytes(), token.as_bytes()))
}

/// Without a token, only requests addressed to a loopback name are served: a page on
/// another site that rebinds its own name to 127.0.0.1 sends its own name as Host.
pub(crate) fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        // HTTP/1.0 without Host: not a browser, so not a rebinding page.
        return true;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The token of a `?token=` login, if the query has one.
fn login_token(query: Option<&str>) -> Option<String> {
    url_token(query?)
}

fn url_token(query: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == "token").then(|| percent_decode(v))
    })
}

/// `%41` -> `A`, `+` -> space; undecodable escapes are kept as they are.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Applies the policy to every request (pages, API, assets).
pub(crate) async fn guard(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(token) = state.token.as_deref() else {
        if !loopback_host(req.headers()) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "this dashboard serves loopback names only (Host must be localhost or \
                 127.0.0.1); to serve other names start it with --token",
            )
            .into_response();
        }
        return next.run(req).await;
    };
    if req.uri().path() == "/" {
        if let Some(given) = login_token(req.uri().query()) {
            if !same(given.as_bytes(), token.as_bytes()) {
                return ApiError::new(StatusCode::UNAUTHORIZED, "wrong token").into_response();
            }
            // The token leaves the address bar at once; the cookie is not readable by
            // scripts and never sent by other sites (SameSite=Strict).
            let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
            let mut res = Redirect::to("/").into_response();
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                res.headers_mut().insert(header::SET_COOKIE, v);
            }
            return res;
        }
    }
    if authorized(req.headers(), token) {
        return next.run(req).await;
    }
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "this dashboard needs its token: open /?token=TOKEN once (sets a cookie), or send \
         Authorization: Bearer TOKEN",
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn only_loopback_may_go_without_a_token() {
        let lo: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let lo6: SocketAddr = "[::1]:8080".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(check_listen(lo, None).unwrap(), None);
        assert_eq!(check_listen(lo6, None).unwrap(), None);
        let err = check_listen(any, None).unwrap_err().to_string();
        assert!(
            err.contains("--token") && err.contains("0.0.0.0:8080"),
            "{err}"
        );
        assert_eq!(
            check_listen(any, Some("s3cret")).unwrap().as_deref(),
            Some("s3cret")
        );
        for bad in ["", "a b", "a;b", "ä", &"x".repeat(513)] {
            assert!(
                matches!(check_listen(any, Some(bad)), Err(DashboardError::BadToken)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_token_comes_as_bearer_or_cookie_and_nothing_else() {
        let t = "s3cret";
        assert!(authorized(
            &headers(&[("authorization", "Bearer s3cret")]),
            t
        ));
        assert!(authorized(
            &headers(&[("cookie", "a=b; fleetbus_token=s3cret")]),
            t
        ));
        for wrong in [
            &[("authorization", "Bearer s3cre")][..],
            &[("authorization", "Basic s3cret")],
            &[("authorization", "Bearer s3crett")],
            &[("cookie", "fleetbus_token=")],
            &[("cookie", "xfleetbus_token=s3cret")],
            &[("cookie", "fleetbus_tokenx=s3cret")],
            &[],
        ] {
            assert!(!authorized(&headers(wrong), t), "{wrong:?}");
        }
    }

    #[test]
    fn without_a_token_only_loopback_hosts_are_served() {
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST",
            "[::1]:8080",
            "127.0.0.2",
        ] {
            assert!(loopback_host(&headers(&[("host", ok)])), "{ok}");
        }
        for bad in [
            "evil.example:8080",
            "10.0.0.1:8080",
            "localhost.evil.example",
            "[::2]:80",
        ] {
            assert!(!loopback_host(&headers(&[("host", bad)])), "{bad}");
        }
    }

    #[test]
    fn login_reads_the_token_from_the_query() {
        assert_eq!(login_token(Some("token=a%2Fb")).as_deref(), Some("a/b"));
        assert_eq!(login_token(Some("x=1&token=abc")).as_deref(), Some("abc"));
        assert_eq!(login_token(Some("x=1")), None);
        assert_eq!(login_token(None), None);
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }
}
