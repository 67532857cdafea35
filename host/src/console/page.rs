//! The console's HTML: escaping, the page frame and the small pieces every page
//! shares. Pages are written as strings; everything that came from a user, a
//! model or a tool passes through [`esc`] on its way in.

use std::fmt::Write;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::session::Viewer;

/// `text` safe inside HTML text and double-quoted attributes.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` as one component of a URL's path or query.
pub fn url_part(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// A millisecond timestamp as `YYYY-MM-DD HH:MM:SS UTC`, inside a `<time>` the
/// browser can read.
pub fn time(at_ms: i64) -> String {
    let iso = crate::event_types::rfc3339_ms(at_ms);
    let shown = iso
        .get(..19)
        .map(|s| s.replace('T', " "))
        .unwrap_or_else(|| iso.clone());
    format!("<time datetime=\"{iso}\">{shown} UTC</time>")
}

/// Milliseconds as a person reads them: `850 ms`, `2.4 s`, `3 min 5 s`.
pub fn duration(ms: i64) -> String {
    match ms {
        ms if ms < 1_000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{:.1} s", ms as f64 / 1_000.0),
        ms => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1_000),
    }
}

/// A status as a badge (its class colours it; the word says it).
pub fn badge(status: &str) -> String {
    let class = match status {
        "completed" | "approved" | "succeeded" | "allowed" => "ok",
        "running" | "waiting_approval" | "pending" | "proposed" | "authorized" => "busy",
        "needs_human" | "stopped" | "expired" | "reconciling" => "warn",
        _ => "bad",
    };
    format!(
        "<span class=\"badge {class}\" data-status=\"{s}\">{s}</span>",
        s = esc(status)
    )
}

/// JSON shown as indented text.
pub fn json_block(value: &Value) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    format!("<pre class=\"json\">{}</pre>", esc(&text))
}

/// Which section of the navigation a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Runs,
    Approvals,
    Audit,
}

/// A whole page: the frame around `main`, with the navigation and sign-out for
/// `viewer`.
pub fn page(viewer: &Viewer, agent: &str, section: Section, title: &str, main: &str) -> String {
    let mut nav = String::new();
    for (s, href, label) in [
        (Section::Runs, "/ui/runs", "Runs"),
        (Section::Approvals, "/ui/approvals", "Approvals"),
        (Section::Audit, "/ui/audit", "Audit"),
    ] {
        let current = if s == section {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(nav, "<li><a href=\"{href}\"{current}>{label}</a></li>");
    }
    let header = format!(
        "<header class=\"top\"><p class=\"brand\"><a href=\"/ui/runs\">CaseOps console</a> <span class=\"agent\">{agent}</span></p>\
         <nav aria-label=\"Console\"><ul>{nav}</ul></nav>\
         <div class=\"who\"><span>{actor} · {tenant}</span>\
         <form method=\"post\" action=\"/ui/sign-out\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><button type=\"submit\" class=\"link\">Sign out</button></form></div></header>",
        agent = esc(agent),
        actor = esc(&viewer.who.actor),
        tenant = esc(&viewer.who.tenant_id),
        csrf = esc(&viewer.csrf),
    );
    frame(title, &header, main)
}

/// The document around a header and a `main` (the sign-in page has no navigation).
pub fn frame(title: &str, header: &str, main: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · CaseOps console</title>\
         <link rel=\"stylesheet\" href=\"/ui/assets/console.css\">\
         <script src=\"/ui/assets/console.js\" defer></script></head>\
         <body><a class=\"skip\" href=\"#main\">Skip to content</a>{header}<main id=\"main\">{main}</main></body></html>",
        title = esc(title),
    )
}

/// An HTML answer with the console's security headers: nothing from elsewhere
/// runs or loads, nothing frames it, nothing caches it.
pub fn html(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    secure_headers(h);
    r
}

pub fn secure_headers(h: &mut axum::http::HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// 303 See Other to `to` (after a form, and to the sign-in page).
pub fn see_other(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    secure_headers(r.headers_mut());
    r
}

/// A page that says what went wrong, with the status it went wrong with.
pub fn error_page(viewer: &Viewer, agent: &str, status: StatusCode, message: &str) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    let main = format!(
        "<h1>{title}</h1><p class=\"alert\" role=\"alert\">{}</p><p><a href=\"/ui/runs\">Back to the runs</a></p>",
        esc(message)
    );
    html(status, page(viewer, agent, Section::Runs, title, &main))
}

/// The pairs of a query string or form body, decoded.
pub fn pairs(text: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(text.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The first value of `name` among `pairs`, if non-empty after trimming.
pub fn value<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.trim())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_leaves_no_markup_or_attribute_break() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
    }

    #[test]
    fn durations_read_in_the_largest_sensible_unit() {
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(2_400), "2.4 s");
        assert_eq!(duration(185_000), "3 min 5 s");
    }

    #[test]
    fn form_values_are_decoded_and_blank_ones_absent() {
        let p = pairs("comment=docs+checked%21&decision=approve&empty=+");
        assert_eq!(value(&p, "comment"), Some("docs checked!"));
        assert_eq!(value(&p, "decision"), Some("approve"));
        assert_eq!(value(&p, "empty"), None);
        assert_eq!(value(&p, "missing"), None);
    }
}
