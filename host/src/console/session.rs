//! Signing in and out of the console, and who a request is.
//!
//! An API key is exchanged once for a session cookie (`HttpOnly`, `SameSite=Strict`,
//! `Path=/ui`, and `Secure` when the request came over TLS through a proxy that
//! says so). The session row names the key only by its hash, so the principal is
//! looked up again on every request: a key taken out of the configuration ends its
//! sessions. Every state-changing form carries the session's CSRF token; the
//! sign-in form, which has no session yet, carries a token that must match a
//! short-lived cookie of its own (double submit), so another site cannot sign a
//! browser in to an account of its choosing.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::Response;
use caseops_runtime::fingerprint::sha256_hex;

use super::Console;
use super::page::{esc, frame, html, pairs, see_other, url_part, value};
use crate::api::ApiPrincipal;
use crate::store::sessions;

/// The session cookie, and the sign-in form's own.
pub const COOKIE: &str = "caseops_console";
const SIGN_IN_COOKIE: &str = "caseops_console_sign_in";
/// A form's body can be no larger (an approval comment is at most 2,000 characters).
pub const MAX_FORM_BYTES: usize = 32 * 1024;

/// Who is looking: the principal of the key the session was opened with.
#[derive(Debug, Clone)]
pub struct Viewer {
    pub who: ApiPrincipal,
    pub csrf: String,
    session_id: String,
}

/// Why a request has no viewer.
pub enum NoViewer {
    /// Not signed in (or the session ended): sign in first.
    SignIn,
    /// The database did not answer.
    Unavailable(crate::store::DbError),
}

/// The value of cookie `name` in `headers`.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// Whether the browser reached us over TLS (a proxy in front says so).
fn over_tls(headers: &HeaderMap) -> bool {
    let forwarded_proto = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
    let forwarded = headers
        .get("forwarded")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("proto=https"));
    forwarded_proto || forwarded
}

/// A `Set-Cookie` value for the console's path.
fn set_cookie(headers: &HeaderMap, name: &str, value: &str, max_age_s: i64) -> HeaderValue {
    let secure = if over_tls(headers) { "; Secure" } else { "" };
    let text =
        format!("{name}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={max_age_s}{secure}");
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Tokens are hex: anything else in a cookie is not one of ours.
fn token_like(text: &str) -> bool {
    (32..=128).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Equal in time that does not depend on where the inputs first differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Console {
    /// The viewer of a request, from its session cookie.
    pub async fn viewer(&self, headers: &HeaderMap) -> Result<Viewer, NoViewer> {
        let Some(id) = cookie(headers, COOKIE).filter(|v| token_like(v)) else {
            return Err(NoViewer::SignIn);
        };
        let session = sessions::find(&self.app.runs.db, id)
            .await
            .map_err(NoViewer::Unavailable)?
            .ok_or(NoViewer::SignIn)?;
        let who = self
            .by_key_hash
            .get(&session.key_hash)
            .filter(|p| p.tenant_id == session.tenant_id)
            .ok_or(NoViewer::SignIn)?;
        Ok(Viewer {
            who: who.clone(),
            csrf: session.csrf_token,
            session_id: id.to_string(),
        })
    }

    /// The viewer, or the answer a page gives without one: to the sign-in page
    /// (coming back to `back_to`, a path under `/ui`, afterwards), or 503.
    pub async fn viewer_or_sign_in(
        &self,
        headers: &HeaderMap,
        back_to: &Uri,
    ) -> Result<Viewer, Response> {
        match self.viewer(headers).await {
            Ok(v) => Ok(v),
            Err(NoViewer::SignIn) => {
                // Nested at `/ui`, a handler sees its path without the prefix.
                let next = back_to
                    .path_and_query()
                    .map_or_else(|| "/ui/runs".to_string(), |p| format!("/ui{}", p.as_str()));
                Err(see_other(&format!("/ui/sign-in?next={}", url_part(&next))))
            }
            Err(NoViewer::Unavailable(e)) => Err(unavailable(e)),
        }
    }

    /// The viewer of a form post whose `csrf` field matches its session's token.
    pub async fn poster(
        &self,
        headers: &HeaderMap,
        form: &[(String, String)],
    ) -> Result<Viewer, Response> {
        let viewer = match self.viewer(headers).await {
            Ok(v) => v,
            Err(NoViewer::SignIn) => return Err(see_other("/ui/sign-in")),
            Err(NoViewer::Unavailable(e)) => return Err(unavailable(e)),
        };
        match value(form, "csrf") {
            Some(token) if same(token, &viewer.csrf) => Ok(viewer),
            _ => Err(forbidden_form()),
        }
    }
}

pub fn unavailable(e: crate::store::DbError) -> Response {
    tracing::warn!("caseops console: database error: {e}");
    let main = "<h1>Service unavailable</h1><p class=\"alert\" role=\"alert\">The database did not answer. Nothing was changed; try again in a moment.</p>";
    html(
        StatusCode::SERVICE_UNAVAILABLE,
        frame("Service unavailable", "", main),
    )
}

fn forbidden_form() -> Response {
    let main = "<h1>Forbidden</h1><p class=\"alert\" role=\"alert\">This form is out of date or did not come from this console (its CSRF token does not match your session). Nothing was changed.</p><p><a href=\"/ui/runs\">Back to the console</a></p>";
    html(StatusCode::FORBIDDEN, frame("Forbidden", "", main))
}

/// Where a sign-in may send the browser afterwards: a console page, nothing else.
fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(n)
            if n.starts_with("/ui/")
                && !n.starts_with("/ui/sign-")
                && !n.contains("//")
                && !n.contains('\\')
                && n.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            n
        }
        _ => "/ui/runs",
    }
}

fn sign_in_form(
    headers: &HeaderMap,
    status: StatusCode,
    next: &str,
    error: Option<&str>,
) -> Response {
    let token = sessions::random_token();
    let alert = error
        .map(|e| {
            format!(
                "<p class=\"alert\" role=\"alert\" id=\"sign-in-error\">{}</p>",
                esc(e)
            )
        })
        .unwrap_or_default();
    let described = if error.is_some() {
        " aria-describedby=\"sign-in-error\""
    } else {
        ""
    };
    let main = format!(
        "<div class=\"sign-in\"><h1>Sign in</h1>\
         <p>Sign in with your API key. The console keeps a session cookie instead of the key; the key is never stored.</p>{alert}\
         <form method=\"post\" action=\"/ui/sign-in\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{token}\"><input type=\"hidden\" name=\"next\" value=\"{next}\">\
         <label for=\"api_key\">API key</label>\
         <input id=\"api_key\" name=\"api_key\" type=\"password\" autocomplete=\"current-password\" required{described}>\
         <button type=\"submit\">Sign in</button></form></div>",
        next = esc(next),
    );
    let mut r = html(status, frame("Sign in", "", &main));
    r.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(headers, SIGN_IN_COOKIE, &token, 3600),
    );
    r
}

/// `GET /ui/sign-in`: the form (or, already signed in, where it would lead).
pub async fn sign_in_page(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let query = pairs(uri.query().unwrap_or(""));
    let next = safe_next(value(&query, "next"));
    if console.viewer(&headers).await.is_ok() {
        return see_other(next);
    }
    sign_in_form(&headers, StatusCode::OK, next, None)
}

/// `POST /ui/sign-in`: an API key for a session.
pub async fn sign_in(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if body.len() > MAX_FORM_BYTES {
        return sign_in_form(
            &headers,
            StatusCode::PAYLOAD_TOO_LARGE,
            "/ui/runs",
            Some("the form is too large"),
        );
    }
    let form = pairs(&String::from_utf8_lossy(&body));
    let next = safe_next(value(&form, "next")).to_string();
    let submitted = value(&form, "csrf").unwrap_or_default();
    let expected = cookie(&headers, SIGN_IN_COOKIE).unwrap_or_default();
    if expected.is_empty() || !same(submitted, expected) {
        return sign_in_form(
            &headers,
            StatusCode::FORBIDDEN,
            &next,
            Some(
                "the sign-in form expired or did not come from this console: please sign in again",
            ),
        );
    }
    let key = value(&form, "api_key").unwrap_or_default();
    let key_hash = sha256_hex(key.as_bytes());
    let Some(who) = console.by_key_hash.get(&key_hash) else {
        tracing::info!("caseops console: a sign-in with an unknown API key was refused");
        return sign_in_form(
            &headers,
            StatusCode::UNAUTHORIZED,
            &next,
            Some("that API key is not accepted"),
        );
    };
    let opened = match sessions::open(
        &console.app.runs.db,
        &who.tenant_id,
        &key_hash,
        console.session_ttl_ms,
    )
    .await
    {
        Ok(o) => o,
        Err(e) => return unavailable(e),
    };
    tracing::info!(tenant = %who.tenant_id, actor = %who.actor, "caseops console: signed in");
    let mut r = see_other(&next);
    let h = r.headers_mut();
    h.append(
        header::SET_COOKIE,
        set_cookie(
            &headers,
            COOKIE,
            &opened.session_id,
            console.session_ttl_ms / 1000,
        ),
    );
    h.append(
        header::SET_COOKIE,
        set_cookie(&headers, SIGN_IN_COOKIE, "", 0),
    );
    r
}

/// `POST /ui/sign-out`: ends the session on every replica and drops the cookie.
pub async fn sign_out(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if body.len() > MAX_FORM_BYTES {
        return forbidden_form();
    }
    let form = pairs(&String::from_utf8_lossy(&body));
    let viewer = match console.poster(&headers, &form).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    if let Err(e) = sessions::close(&console.app.runs.db, &viewer.session_id).await {
        return unavailable(e);
    }
    let mut r = see_other("/ui/sign-in");
    r.headers_mut()
        .append(header::SET_COOKIE, set_cookie(&headers, COOKIE, "", 0));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sign_in_only_leads_back_into_the_console() {
        assert_eq!(safe_next(Some("/ui/runs/r-1?x=1")), "/ui/runs/r-1?x=1");
        for outside in [
            "https://evil.example/ui/",
            "//evil.example/ui/",
            "/ui//evil.example",
            "/v1/approvals",
            "/ui/sign-out",
            "/ui/\\evil",
        ] {
            assert_eq!(safe_next(Some(outside)), "/ui/runs", "{outside}");
        }
        assert_eq!(safe_next(None), "/ui/runs");
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; caseops_console=abc; caseops_console_sign_in=def"),
        );
        assert_eq!(cookie(&h, COOKIE), Some("abc"));
        assert_eq!(cookie(&h, SIGN_IN_COOKIE), Some("def"));
        assert_eq!(cookie(&h, "b"), None);
    }

    #[test]
    fn cookies_are_secure_only_behind_tls() {
        let plain = HeaderMap::new();
        let v = set_cookie(&plain, COOKIE, "abc", 60);
        assert_eq!(
            v.to_str().unwrap(),
            "caseops_console=abc; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=60"
        );
        let mut tls = HeaderMap::new();
        tls.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert!(
            set_cookie(&tls, COOKIE, "abc", 60)
                .to_str()
                .unwrap()
                .ends_with("; Secure")
        );
    }
}
