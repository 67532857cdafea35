//! How the MCP client's requests reach the server: over HTTP, or, when the tool
//! server runs in the same process, handed to its router without a socket.
//!
//! The in-process way still builds a whole HTTP request — `Host`, bearer task
//! token, `Accept`, protocol headers — and the server's router answers it with
//! every check it makes of a request from the network (Host and Origin, token,
//! scopes, body limit, Cedar, output schema). What it saves is the socket: the
//! connection, HTTP/1.1 encoding and parsing on both sides, and the wake-ups of
//! the connection's tasks.

use std::time::Duration;

use axum::body::Body;
use http_body_util::BodyExt;
use tower::ServiceExt;

use super::client::InProcessUrlError;
use crate::detachable::Detachable;

/// The answer to one POST, whichever way it travelled.
pub(crate) struct Answer {
    pub status: axum::http::StatusCode,
    pub is_sse: bool,
    pub text: String,
}

/// Why a POST got no answer.
pub(crate) enum Lost {
    /// Nothing was sent: safe to send again.
    NotSent(String),
    /// The request went out and no answer came back: the server may have acted.
    NoAnswer(String),
}

/// A request is given up after this long, as the HTTP client's timeout does.
const TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) enum Transport {
    Http(reqwest::Client),
    /// The router of the tool server in this process, with the `Host` and path of
    /// the server's public URL (what the server accepts from the network too).
    InProcess {
        router: axum::Router,
        host: String,
        path: String,
    },
}

impl Transport {
    pub fn http() -> Self {
        crate::install_tls_provider();
        let http = reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(90))
            .timeout(TIMEOUT)
            .build()
            .expect("an HTTP client with no TLS options always builds");
        Transport::Http(http)
    }

    /// Requests for `url` handed to `router`, the tool server serving that URL.
    pub fn in_process(router: axum::Router, url: &str) -> Result<Self, InProcessUrlError> {
        let refused = |reason: String| InProcessUrlError {
            url: url.to_string(),
            reason,
        };
        let parsed = reqwest::Url::parse(url).map_err(|e| refused(e.to_string()))?;
        let host = parsed
            .host_str()
            .ok_or_else(|| refused("it names no host".into()))?;
        let host = match parsed.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        let path = match parsed.query() {
            Some(query) => format!("{}?{query}", parsed.path()),
            None => parsed.path().to_string(),
        };
        Ok(Transport::InProcess { router, host, path })
    }

    /// POSTs `body` to `url` with the bearer `token` and `headers`.
    pub async fn post(
        &self,
        url: &str,
        token: &str,
        headers: &[(&'static str, String)],
        body: String,
    ) -> Result<Answer, Lost> {
        match self {
            Transport::Http(http) => post_http(http, url, token, headers, body).await,
            Transport::InProcess { router, host, path } => {
                post_in_process(router, host, path, token, headers, body).await
            }
        }
    }
}

async fn post_http(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    headers: &[(&'static str, String)],
    body: String,
) -> Result<Answer, Lost> {
    let mut req = http
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(body);
    for (name, value) in headers {
        req = req.header(*name, value);
    }
    if let Some(parent) = crate::traces::traceparent() {
        req = req.header("traceparent", parent);
    }
    let resp = req.send().await.map_err(|e| match e.is_connect() {
        true => Lost::NotSent(e.to_string()),
        false => Lost::NoAnswer(e.to_string()),
    })?;
    let status = resp.status();
    let is_sse = is_sse(resp.headers());
    let text = resp
        .text()
        .await
        .map_err(|e| Lost::NoAnswer(e.to_string()))?;
    Ok(Answer {
        status,
        is_sse,
        text,
    })
}

async fn post_in_process(
    router: &axum::Router,
    host: &str,
    path: &str,
    token: &str,
    headers: &[(&'static str, String)],
    body: String,
) -> Result<Answer, Lost> {
    let mut req = axum::http::Request::post(path)
        .header("host", host)
        .header("authorization", format!("Bearer {token}"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    for (name, value) in headers {
        req = req.header(*name, value.as_str());
    }
    if let Some(parent) = crate::traces::traceparent() {
        req = req.header("traceparent", parent);
    }
    let req = req
        .body(Body::from(body))
        .map_err(|e| Lost::NotSent(format!("the request cannot be built: {e}")))?;
    // As if in its own task, as a connection would be (see `Detachable`), but
    // polled in the run's: a task spawned per call woke the other worker thread,
    // which took the call over, and the run's work went back and forth between
    // the two threads.
    let router = router.clone();
    let handled = Detachable::new(async move {
        let resp = router.oneshot(req).await.unwrap_or_else(|e| match e {});
        let status = resp.status();
        let is_sse = is_sse(resp.headers());
        let bytes = resp.into_body().collect().await.map(|b| b.to_bytes());
        (status, is_sse, bytes)
    });
    let (status, is_sse, bytes) = match tokio::time::timeout(TIMEOUT, handled).await {
        Ok(Some(answer)) => answer,
        Ok(None) => {
            return Err(Lost::NoAnswer(
                "the tool server failed: its handler panicked".into(),
            ));
        }
        Err(_) => {
            return Err(Lost::NoAnswer(
                "the tool server did not answer in time".into(),
            ));
        }
    };
    let bytes = bytes.map_err(|e| Lost::NoAnswer(e.to_string()))?;
    Ok(Answer {
        status,
        is_sse,
        // Valid UTF-8 (every answer of ours) is taken as it is, without the
        // lossy decoder's pass over each character.
        text: String::from_utf8(Vec::from(bytes))
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
    })
}

fn is_sse(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(url: &str) -> (String, String) {
        match Transport::in_process(axum::Router::new(), url) {
            Ok(Transport::InProcess { host, path, .. }) => (host, path),
            _ => panic!("`{url}` should make an in-process transport"),
        }
    }

    #[test]
    fn an_in_process_request_names_the_servers_public_host_and_path() {
        assert_eq!(
            parts("http://127.0.0.1:8081/mcp"),
            ("127.0.0.1:8081".into(), "/mcp".into())
        );
        assert_eq!(
            parts("https://tools.example"),
            ("tools.example".into(), "/".into())
        );
        assert_eq!(
            parts("http://h:80/a/mcp?x=1"),
            ("h".into(), "/a/mcp?x=1".into())
        );
        let refused = Transport::in_process(axum::Router::new(), "not a url").err();
        assert_eq!(
            refused.map(|e| e.to_string()),
            Some(
                "`not a url` cannot name the in-process mcp server: relative URL without a base"
                    .into()
            )
        );
    }
}
