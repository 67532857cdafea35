//! The operator console at `/ui` over real HTTP against `caseops serve`, as a
//! browser without script would use it: the sign-in exchange and its cookie, CSRF on
//! every form, tenant scoping, a decision that resumes its run exactly as the API's
//! does, the run page, filters and pages, the live streams and the audit check.
//! (`.ci/console-browser` drives the same pages in Chromium.)

mod db_support;
mod serve_support;

use std::collections::HashMap;
use std::time::Duration;

use db_support::fresh_databases;
use reqwest::header::{HeaderMap, SET_COOKIE};
use serde_json::{Value, json};
use serve_support::{Served, serve};

const DEMO: &str = "dev-key-tenant-demo";
const SUPERVISOR: &str = "dev-key-tenant-demo-supervisor";
const OTHER: &str = "dev-key-tenant-other";

/// A cookie jar and a client that does not follow redirects: each answer is seen.
struct Browser {
    base: String,
    http: reqwest::Client,
    cookies: HashMap<String, String>,
}

struct Page {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Page {
    fn location(&self) -> &str {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all(SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    }

    /// The value of the first hidden input named `name`.
    fn hidden(&self, name: &str) -> String {
        let marker = format!("name=\"{name}\" value=\"");
        let at = self
            .body
            .find(&marker)
            .unwrap_or_else(|| panic!("no `{name}` field in {}", self.body));
        let rest = &self.body[at + marker.len()..];
        rest[..rest.find('"').unwrap()].to_string()
    }
}

impl Browser {
    fn new(base: &str) -> Self {
        Browser {
            base: base.to_string(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: HashMap::new(),
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn send(&mut self, request: reqwest::RequestBuilder) -> Page {
        let r = request
            .header("cookie", self.cookie_header())
            .send()
            .await
            .unwrap();
        let page = Page {
            status: r.status().as_u16(),
            headers: r.headers().clone(),
            body: String::new(),
        };
        let body = r.text().await.unwrap();
        for c in page.set_cookies() {
            let pair = c.split(';').next().unwrap();
            let (k, v) = pair.split_once('=').unwrap();
            if v.is_empty() || c.contains("Max-Age=0") {
                self.cookies.remove(k);
            } else {
                self.cookies.insert(k.to_string(), v.to_string());
            }
        }
        Page { body, ..page }
    }

    async fn get(&mut self, path: &str) -> Page {
        let request = self.http.get(format!("{}{path}", self.base));
        self.send(request).await
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let body: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let request = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        self.send(request).await
    }

    /// Signs in with `key`, as the form does.
    async fn sign_in(&mut self, key: &str) -> Page {
        let form = self.get("/ui/sign-in").await;
        assert_eq!(form.status, 200, "{}", form.body);
        let csrf = form.hidden("csrf");
        self.post(
            "/ui/sign-in",
            &[("csrf", &csrf), ("api_key", key), ("next", "/ui/runs")],
        )
        .await
    }

    /// The session's CSRF token, from the sign-out form every page carries.
    async fn csrf(&mut self) -> String {
        self.get("/ui/runs").await.hidden("csrf")
    }
}

async fn api(
    served: &Served,
    method: &str,
    key: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let client = reqwest::Client::new();
    let url = format!("{}{path}", served.api);
    let mut request = match method {
        "POST" => client.post(url),
        _ => client.get(url),
    }
    .header("x-api-key", key);
    if let Some(b) = body {
        request = request
            .header(
                "idempotency-key",
                format!("console-{}", uuid::Uuid::new_v4().simple()),
            )
            .json(&b);
    }
    let r = request.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn start(served: &Served, key: &str, case: &str, goal: &str) -> String {
    let (status, run) = api(
        served,
        "POST",
        key,
        &format!("/v1/cases/{case}/agent-runs"),
        Some(json!({ "goal": goal })),
    )
    .await;
    assert!(status == 201 || status == 202, "{status} {run}");
    run["run_id"].as_str().unwrap().to_string()
}

async fn settled(served: &Served, run_id: &str, want: &str) -> Value {
    let mut run = Value::Null;
    for _ in 0..150 {
        run = api(
            served,
            "GET",
            DEMO,
            &format!("/v1/agent-runs/{run_id}"),
            None,
        )
        .await
        .1;
        if run["status"] == want {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("run {run_id} did not reach `{want}`: {run}");
}

/// A C-104 run of `key`, parked for approval; returns (run id, approval id).
async fn parked(served: &Served, key: &str) -> (String, String) {
    let run_id = start(served, key, "C-104", "Hand case C-104 to the assessors.").await;
    settled(served, &run_id, "waiting_approval").await;
    let (_, list) = api(served, "GET", key, "/v1/approvals?status=pending", None).await;
    let approval = list["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["run_id"] == run_id.as_str())
        .unwrap()["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    (run_id, approval)
}

/// The list under `key` of an API answer (or the answer itself, when a list).
fn items(answer: &Value, key: &str) -> Vec<Value> {
    answer[key]
        .as_array()
        .or_else(|| answer.as_array())
        .unwrap_or_else(|| panic!("no `{key}` in {answer}"))
        .clone()
}

/// What a finished run did, for comparing two runs: status, stop reason, and each
/// tool call's name and status.
async fn trace(served: &Served, run_id: &str) -> Value {
    let run = api(
        served,
        "GET",
        DEMO,
        &format!("/v1/agent-runs/{run_id}"),
        None,
    )
    .await
    .1;
    let ledger = api(
        served,
        "GET",
        DEMO,
        &format!("/v1/agent-runs/{run_id}/tool-executions"),
        None,
    )
    .await
    .1;
    let calls: Vec<Value> = items(&ledger, "tool_executions")
        .iter()
        .map(|c| json!([c["tool_name"], c["status"]]))
        .collect();
    json!({"status": run["status"], "stop_reason": run["stop_reason"], "state": run["state"], "calls": calls})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_exchanges_the_key_for_a_strict_http_only_cookie_and_signing_out_ends_it() {
    let dbs = fresh_databases("console_sign_in").await;
    let served = serve(dbs.sqlite(), &[], &[], false);
    let mut b = Browser::new(&served.api);

    let away = b.get("/ui/runs?status=completed").await;
    assert_eq!(away.status, 303);
    assert_eq!(
        away.location(),
        "/ui/sign-in?next=%2Fui%2Fruns%3Fstatus%3Dcompleted"
    );

    // A sign-in form posted without its own cookie (from another site) is refused.
    let mut stranger = Browser::new(&served.api);
    let forged = stranger
        .post(
            "/ui/sign-in",
            &[
                ("csrf", "0123456789abcdef0123456789abcdef"),
                ("api_key", DEMO),
            ],
        )
        .await;
    assert_eq!(forged.status, 403, "{}", forged.body);
    assert!(!stranger.cookies.contains_key("caseops_console"));

    let wrong = b.sign_in("not-a-key").await;
    assert_eq!(wrong.status, 401);
    assert!(
        wrong.body.contains("that API key is not accepted"),
        "{}",
        wrong.body
    );
    assert!(!b.cookies.contains_key("caseops_console"));

    let signed = b.sign_in(DEMO).await;
    assert_eq!(signed.status, 303, "{}", signed.body);
    assert_eq!(signed.location(), "/ui/runs");
    let cookie = signed
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("caseops_console="))
        .unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    assert!(!cookie.contains(DEMO), "the key itself is not the cookie");

    // Behind a TLS-terminating proxy the cookie is Secure.
    let mut tls = Browser::new(&served.api);
    let form = tls.get("/ui/sign-in").await;
    let csrf = form.hidden("csrf");
    let request = tls
        .http
        .post(format!("{}/ui/sign-in", served.api))
        .header("x-forwarded-proto", "https")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}&api_key={DEMO}"));
    let secure = tls.send(request).await;
    assert!(
        secure
            .set_cookies()
            .iter()
            .any(|c| c.starts_with("caseops_console=") && c.contains("; Secure")),
        "{:?}",
        secure.set_cookies()
    );

    let runs = b.get("/ui/runs").await;
    assert_eq!(runs.status, 200);
    assert!(
        runs.body.contains("user:demo-investigator"),
        "{}",
        runs.body
    );
    let csp = runs.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(runs.headers["cache-control"], "no-store");

    // Sign-out needs the session's token, and ends the session on the server.
    let old = b.cookies.get("caseops_console").unwrap().clone();
    let refused = b.post("/ui/sign-out", &[("csrf", "deadbeef")]).await;
    assert_eq!(refused.status, 403);
    let csrf = b.csrf().await;
    let out = b.post("/ui/sign-out", &[("csrf", &csrf)]).await;
    assert_eq!(out.status, 303);
    assert!(!b.cookies.contains_key("caseops_console"));
    b.cookies.insert("caseops_console".into(), old);
    let after = b.get("/ui/runs").await;
    assert_eq!(
        after.status, 303,
        "a replayed cookie of an ended session is not a session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_in_the_console_resumes_the_run_exactly_as_one_through_the_api() {
    // Approving marks the case ready once, so each way of deciding gets a database
    // of its own (per backend).
    let through_api = fresh_databases("console_decide_api").await;
    let through_console = fresh_databases("console_decide_ui").await;
    for ((backend, api_url), (_, console_url)) in through_api.into_iter().zip(through_console) {
        let reference = serve(&api_url, &[], &[], false);
        let (by_api, api_approval) = parked(&reference, DEMO).await;
        let r = reqwest::Client::new()
            .post(format!(
                "{}/v1/approvals/{api_approval}/decision",
                reference.api
            ))
            .header("x-api-key", SUPERVISOR)
            .json(&json!({"decision": "approve", "comment": "via the API"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{backend}");
        settled(&reference, &by_api, "completed").await;

        let served = serve(&console_url, &[], &[], false);
        let (by_console, approval) = parked(&served, DEMO).await;
        let (_, own) = parked(&served, SUPERVISOR).await;

        // The requester cannot decide: the page says why, and a post is refused.
        let mut requester = Browser::new(&served.api);
        requester.sign_in(DEMO).await;
        let page = requester.get("/ui/approvals").await;
        assert!(page.body.contains("not decide them"), "{}", page.body);
        let csrf = requester.csrf().await;
        let refused = requester
            .post(
                &format!("/ui/approvals/{approval}/decision"),
                &[("csrf", &csrf), ("decision", "approve")],
            )
            .await;
        assert_eq!(refused.status, 403, "{backend}");
        assert!(refused.body.contains("approval:decide"), "{}", refused.body);

        let mut b = Browser::new(&served.api);
        assert_eq!(b.sign_in(SUPERVISOR).await.status, 303);
        let queue = b.get("/ui/approvals").await;
        assert_eq!(queue.status, 200);
        assert!(
            queue.body.contains(&format!("id=\"approval-{approval}\"")),
            "{backend}: {}",
            queue.body
        );
        assert!(
            queue
                .body
                .contains("caseops_mark_case_ready_for_assessment")
        );
        assert!(
            queue
                .body
                .contains("&quot;case_id&quot;: &quot;C-104&quot;"),
            "the exact arguments"
        );
        assert!(
            queue.body.contains("user:demo-investigator"),
            "the requester"
        );

        // Separation of duties: the supervisor's own run is not the supervisor's to decide.
        assert!(
            queue.body.contains("separation of duties"),
            "{}",
            queue.body
        );
        let csrf = b.csrf().await;
        let refused = b
            .post(
                &format!("/ui/approvals/{own}/decision"),
                &[("csrf", &csrf), ("decision", "approve")],
            )
            .await;
        assert_eq!(refused.status, 403, "{backend}");
        assert!(
            refused.body.contains("separation of duties"),
            "{}",
            refused.body
        );

        // A form without the session's token changes nothing.
        let path = format!("/ui/approvals/{approval}/decision");
        let forged = b.post(&path, &[("decision", "approve")]).await;
        assert_eq!(forged.status, 403, "{backend}");
        let (_, still) = api(
            &served,
            "GET",
            DEMO,
            &format!("/v1/approvals/{approval}"),
            None,
        )
        .await;
        assert_eq!(still["status"], "pending", "{backend}");

        let decided = b
            .post(
                &path,
                &[
                    ("csrf", &csrf),
                    ("decision", "approve"),
                    ("comment", "checked in the console"),
                ],
            )
            .await;
        assert_eq!(decided.status, 303, "{backend}: {}", decided.body);
        assert!(
            decided
                .location()
                .starts_with(&format!("/ui/approvals?decided={approval}"))
        );
        let notice = b.get(decided.location()).await;
        assert!(notice.body.contains("is approved"), "{}", notice.body);
        settled(&served, &by_console, "completed").await;
        assert_eq!(
            trace(&served, &by_console).await,
            trace(&reference, &by_api).await,
            "{backend}: the console's decision resumes the run as the API's does"
        );
        let (_, a) = api(
            &served,
            "GET",
            DEMO,
            &format!("/v1/approvals/{approval}"),
            None,
        )
        .await;
        assert_eq!(a["decided_by"], "user:demo-supervisor", "{backend}: {a}");
        assert_eq!(a["comment"], "checked in the console");

        // A second decision is refused, and the page says so with 409.
        let again = b
            .post(&path, &[("csrf", &csrf), ("decision", "reject")])
            .await;
        assert_eq!(again.status, 409, "{backend}");
        assert!(again.body.contains("already decided"), "{}", again.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenant_sees_none_of_it() {
    let dbs = fresh_databases("console_tenants").await;
    let served = serve(dbs.sqlite(), &[], &[], false);
    let (run_id, approval) = parked(&served, DEMO).await;
    let mut other = Browser::new(&served.api);
    assert_eq!(other.sign_in(OTHER).await.status, 303);
    let runs = other.get("/ui/runs").await;
    assert!(!runs.body.contains(&run_id), "{}", runs.body);
    assert!(runs.body.contains("No runs match."));
    let theirs = other.get(&format!("/ui/runs/{run_id}")).await;
    let missing = other.get("/ui/runs/no-such-run").await;
    assert_eq!((theirs.status, missing.status), (404, 404));
    assert!(theirs.body.contains("There is no such run."));
    assert_eq!(
        other.get(&format!("/ui/runs/{run_id}/events")).await.status,
        404
    );
    let queue = other.get("/ui/approvals").await;
    assert!(!queue.body.contains(&approval));
    let audit = other.get("/ui/audit").await;
    assert!(!audit.body.contains(&run_id));

    let mut supervisor = Browser::new(&served.api);
    supervisor.sign_in("dev-key-tenant-other-supervisor").await;
    let csrf = supervisor.csrf().await;
    let refused = supervisor
        .post(
            &format!("/ui/approvals/{approval}/decision"),
            &[("csrf", &csrf), ("decision", "approve")],
        )
        .await;
    assert_eq!(refused.status, 404, "{}", refused.body);
    let (_, a) = api(
        &served,
        "GET",
        DEMO,
        &format!("/v1/approvals/{approval}"),
        None,
    )
    .await;
    assert_eq!(a["status"], "pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_page_draws_its_path_and_lists_every_call_with_its_decision() {
    let dbs = fresh_databases("console_run_page").await;
    let served = serve(dbs.sqlite(), &[], &[], false);
    let goal = "Check C-102 <script>alert(1)</script>";
    let run_id = start(&served, DEMO, "C-102", goal).await;
    settled(&served, &run_id, "completed").await;
    let mut b = Browser::new(&served.api);
    b.sign_in(DEMO).await;
    let page = b.get(&format!("/ui/runs/{run_id}")).await;
    assert_eq!(page.status, 200);
    let body = &page.body;
    assert!(!body.contains("<script>alert(1)"), "user input is escaped");
    assert!(body.contains("Check C-102 &lt;script&gt;alert(1)&lt;/script&gt;"));
    // Every state of the compiled machine, the run's path thick.
    for state in [
        "created",
        "planning",
        "tool_proposed",
        "tool_authorized",
        "tool_running",
        "observing",
        "completed",
        "failed",
    ] {
        assert!(body.contains(&format!("data-state=\"{state}\"")), "{state}");
    }
    assert!(body.contains("class=\"edge taken\" data-from=\"created\" data-to=\"planning\""));
    assert!(body.contains("class=\"edge taken\" data-from=\"planning\" data-to=\"completed\""));
    assert!(
        body.contains("class=\"edge\" data-from=\"tool_proposed\" data-to=\"waiting_approval\""),
        "not taken by C-102"
    );
    assert!(body.contains("class=\"node terminal visited current\" data-state=\"completed\""));
    // Four reads, each allowed with its evidence reference; the result and where its
    // citations came from.
    let ledger = api(
        &served,
        "GET",
        DEMO,
        &format!("/v1/agent-runs/{run_id}/tool-executions"),
        None,
    )
    .await
    .1;
    let calls = items(&ledger, "tool_executions");
    assert_eq!(calls.len(), 4);
    for c in &calls {
        assert!(body.contains(&format!(
            "<code>{}</code> <span class=\"version\">",
            c["tool_name"].as_str().unwrap()
        )));
    }
    assert_eq!(body.matches("allowed by policy").count(), 4);
    assert!(body.contains("(cited by the result)"));
    assert!(body.contains("Where each cited evidence reference came from"));
    assert!(body.contains("Timeline"));
    let checkpoints = api(
        &served,
        "GET",
        DEMO,
        &format!("/v1/agent-runs/{run_id}/checkpoints"),
        None,
    )
    .await
    .1;
    let count = items(&checkpoints, "checkpoints").len();
    assert_eq!(
        body.matches("</td><td>+").count(),
        count,
        "one timeline row per checkpoint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runs_list_filters_by_status_resource_and_stop_reason_and_pages_without_overlap() {
    let dbs = fresh_databases("console_list").await;
    let served = serve(dbs.sqlite(), &[], &[], false);
    let mut completed = Vec::new();
    for _ in 0..27 {
        completed.push(start(&served, DEMO, "C-102", "Check C-102.").await);
    }
    let (waiting, _) = parked(&served, DEMO).await;
    let mut b = Browser::new(&served.api);
    b.sign_in(DEMO).await;

    let first = b.get("/ui/runs").await;
    assert!(first.body.contains(&waiting), "newest first");
    assert_eq!(first.body.matches("<tr data-run-id=").count(), 25);
    let next = first
        .body
        .split("href=\"")
        .find_map(|s| {
            s.split_once("\" rel=\"next\"")
                .map(|(h, _)| h.replace("&amp;", "&"))
        })
        .expect("a link to older runs");
    let second = b.get(&next).await;
    assert_eq!(second.body.matches("<tr data-run-id=").count(), 3);
    let mut seen: Vec<&String> = completed
        .iter()
        .filter(|id| first.body.contains(id.as_str()) || second.body.contains(id.as_str()))
        .collect();
    seen.dedup();
    assert_eq!(seen.len(), 27, "every run on one page or the other");
    assert!(
        completed
            .iter()
            .all(|id| !(first.body.contains(id.as_str()) && second.body.contains(id.as_str())))
    );
    assert!(!second.body.contains("rel=\"next\""));

    let waiting_only = b.get("/ui/runs?status=waiting_approval").await;
    assert_eq!(waiting_only.body.matches("<tr data-run-id=").count(), 1);
    assert!(waiting_only.body.contains(&waiting));
    let by_resource = b.get("/ui/runs?resource=C-104").await;
    assert_eq!(by_resource.body.matches("<tr data-run-id=").count(), 1);
    let by_reason = b.get("/ui/runs?stop_reason=no-such-reason").await;
    assert!(by_reason.body.contains("No runs match."));
}

/// The SSE events of a stream until `until` returns true or 15 s pass.
async fn events_until(
    mut response: reqwest::Response,
    until: impl Fn(&[(String, Value)]) -> bool,
) -> Vec<(String, Value)> {
    let mut text = String::new();
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !until(&events) {
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .unwrap_or_else(|_| panic!("no such event within 15 s: {events:?}"))
            .unwrap()
            .expect("the stream stays open");
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let kind = block
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or("")
                .to_string();
            let data = block
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap_or("null");
            if !kind.is_empty() {
                events.push((kind, serde_json::from_str(data).unwrap_or(Value::Null)));
            }
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_list_reports_a_watched_run_moving_and_a_new_run() {
    let dbs = fresh_databases("console_live").await;
    let served = serve(dbs.sqlite(), &[], &[], false);
    let (waiting, approval) = parked(&served, DEMO).await;
    let mut b = Browser::new(&served.api);
    b.sign_in(DEMO).await;
    let page = b.get("/ui/runs").await;
    let live = page
        .body
        .split("data-live-runs=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("the list names its live stream")
        .replace("&amp;", "&");
    assert!(live.contains(&waiting), "{live}");
    let response = b
        .http
        .get(format!("{}{live}", served.api))
        .header("cookie", b.cookie_header())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let deciding = tokio::spawn({
        let api_url = served.api.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            reqwest::Client::new()
                .post(format!("{api_url}/v1/approvals/{approval}/decision"))
                .header("x-api-key", SUPERVISOR)
                .json(&json!({"decision": "approve"}))
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    let events = events_until(response, |events| {
        events
            .iter()
            .any(|(k, v)| k == "run" && v["status"] == "completed")
    })
    .await;
    assert_eq!(deciding.await.unwrap(), 200);
    assert!(
        events
            .iter()
            .all(|(k, v)| k != "run" || v["run_id"] == waiting.as_str()),
        "{events:?}"
    );

    // A run started after the page was drawn is announced.
    let response = b
        .http
        .get(format!("{}{live}", served.api))
        .header("cookie", b.cookie_header())
        .send()
        .await
        .unwrap();
    let api_url = served.api.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = reqwest::Client::new()
            .post(format!("{api_url}/v1/cases/C-102/agent-runs"))
            .header("x-api-key", DEMO)
            .header("idempotency-key", "console-live-new-0001")
            .json(&json!({"goal": "Check C-102."}))
            .send()
            .await;
    });
    let events = events_until(response, |events| {
        events.iter().any(|(k, v)| k == "new" && v["count"] == 1)
    })
    .await;
    assert!(!events.is_empty());

    // Without a session there is no stream.
    let anonymous = reqwest::get(format!("{}{live}", served.api)).await.unwrap();
    assert_eq!(anonymous.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_page_verifies_the_chain_and_names_the_first_broken_link() {
    let dbs = fresh_databases("console_audit").await;
    let url = dbs.sqlite().to_string();
    let served = serve(&url, &[], &[], false);
    let run_id = start(&served, DEMO, "C-102", "Check C-102.").await;
    settled(&served, &run_id, "completed").await;
    let mut b = Browser::new(&served.api);
    b.sign_in(DEMO).await;
    let page = b.get("/ui/audit").await;
    assert!(page.body.contains(&run_id), "the latest events");
    assert!(
        !page.body.contains("id=\"verification\""),
        "verified on demand only"
    );
    let verified = b.get("/ui/audit?verify=1").await;
    assert!(
        verified.body.contains("The chain holds"),
        "{}",
        verified.body
    );

    // An edited event breaks the chain from there.
    let db = caseops_host::store::Db::open_existing(&url, 1, &caseops_service::reference::SCHEMA)
        .await
        .unwrap();
    db.execute(
        "UPDATE audit_events SET payload = '{\"edited\":true}' WHERE tenant_id = 'tenant-demo' AND seq = 2",
        &[],
    )
    .await
    .unwrap();
    let broken = b.get("/ui/audit?verify=1").await;
    assert!(
        broken.body.contains("The chain is broken"),
        "{}",
        broken.body
    );
    assert!(
        broken.body.contains("event 2 was altered"),
        "{}",
        broken.body
    );
}
