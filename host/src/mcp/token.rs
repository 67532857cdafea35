//! Audience-bound task tokens: HS256 JWTs the host issues per run and the MCP server
//! verifies. Tenant, task, scopes and the run-bound resource come only from here.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, decode, encode};
use serde::{Deserialize, Serialize};

/// Allowed clock skew between issuer and server.
pub const LEEWAY_SECONDS: u64 = 5;
pub const MIN_TTL_SECONDS: u64 = 30;
pub const MAX_TTL_SECONDS: u64 = 600;

/// The claims of a task token. The run-bound resource claim is named after the
/// bundle's resource id field (e.g. `order_id`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskClaims {
    pub iss: String,
    /// One audience or several (RFC 7519 allows both; the verifier requires this
    /// server among them). Issued tokens carry one.
    #[serde(deserialize_with = "one_or_many", serialize_with = "one_or_list")]
    pub aud: Vec<String>,
    pub sub: String,
    pub tenant_id: String,
    pub task_id: String,
    /// Space-separated scopes.
    pub scope: String,
    // NumericDate is a JSON number: `1700000000.0` is as good as `1700000000`.
    #[serde(deserialize_with = "numeric_date")]
    pub iat: u64,
    #[serde(deserialize_with = "numeric_date")]
    pub nbf: u64,
    #[serde(deserialize_with = "numeric_date")]
    pub exp: u64,
    pub jti: String,
    /// The run's task stage; absent, the bundle's initial stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// The action fingerprint a person approved: present only on a token minted for
    /// that one approved call, so the tool server can tell the policies it was
    /// approved (`context.approval`) without trusting anything the model sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_action: Option<String>,
    /// The run-bound resource claim, and any other claim of any JSON type (an
    /// issuer may add its own; they are kept, not interpreted).
    #[serde(flatten)]
    pub resource: BTreeMap<String, serde_json::Value>,
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Aud {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Aud::deserialize(d)? {
        Aud::One(a) => vec![a],
        Aud::Many(a) => a,
    })
}

fn one_or_list<S: serde::Serializer>(aud: &[String], s: S) -> Result<S::Ok, S::Error> {
    match aud {
        [one] => s.serialize_str(one),
        many => many.serialize(s),
    }
}

fn numeric_date<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    if let Some(u) = n.as_u64() {
        return Ok(u);
    }
    match n.as_f64() {
        Some(f) if f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64 => Ok(f as u64),
        _ => Err(serde::de::Error::custom(format!(
            "`{n}` is not a whole non-negative NumericDate"
        ))),
    }
}

impl TaskClaims {
    pub fn scopes(&self) -> Vec<String> {
        self.scope.split_whitespace().map(str::to_string).collect()
    }

    pub fn has_scope(&self, scope: &str) -> bool {
        self.scope.split_whitespace().any(|s| s == scope)
    }

    pub fn resource_id(&self, field: &str) -> Option<&str> {
        self.resource.get(field).and_then(serde_json::Value::as_str)
    }
}

/// Why a token was refused. Messages never include the token itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("no bearer token")]
    Missing,
    #[error("token is malformed")]
    Malformed,
    #[error("token signature is invalid")]
    Signature,
    #[error("token algorithm is not HS256")]
    Algorithm,
    /// The JOSE header itself is wrong (no `alg`, not JSON).
    #[error("token header is invalid: {0}")]
    Header(String),
    #[error("token is expired")]
    Expired,
    #[error("token is not valid yet")]
    NotYetValid,
    #[error("token was issued in the future")]
    IssuedInFuture,
    #[error("token audience is not this server")]
    Audience,
    #[error("token issuer is not trusted")]
    Issuer,
    #[error("token lacks claim `{0}`")]
    MissingClaim(String),
    #[error("token lifetime of {0} s is outside 30..=600 s")]
    Lifetime(u64),
    #[error("the signing key is unusable")]
    Key,
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Signs task tokens (the host side).
#[derive(Clone)]
pub struct TokenIssuer {
    key: EncodingKey,
    issuer: String,
    audience: String,
    resource_field: String,
    ttl: u64,
}

impl TokenIssuer {
    pub fn new(
        secret: &[u8],
        issuer: impl Into<String>,
        audience: impl Into<String>,
        resource_field: impl Into<String>,
        ttl_seconds: u64,
    ) -> Result<Self, TokenError> {
        if !(MIN_TTL_SECONDS..=MAX_TTL_SECONDS).contains(&ttl_seconds) {
            return Err(TokenError::Lifetime(ttl_seconds));
        }
        Ok(Self {
            key: EncodingKey::from_secret(secret).map_err(|_| TokenError::Key)?,
            issuer: issuer.into(),
            audience: audience.into(),
            resource_field: resource_field.into(),
            ttl: ttl_seconds,
        })
    }

    /// The claims of a fresh token for one task.
    pub fn claims(
        &self,
        subject: &str,
        tenant_id: &str,
        task_id: &str,
        resource_id: &str,
        scopes: &[String],
    ) -> TaskClaims {
        let iat = now();
        TaskClaims {
            iss: self.issuer.clone(),
            aud: vec![self.audience.clone()],
            sub: subject.to_string(),
            tenant_id: tenant_id.to_string(),
            task_id: task_id.to_string(),
            scope: scopes.join(" "),
            iat,
            nbf: iat,
            exp: iat + self.ttl,
            jti: uuid::Uuid::new_v4().to_string(),
            stage: None,
            approved_action: None,
            resource: BTreeMap::from([(self.resource_field.clone(), resource_id.into())]),
        }
    }

    pub fn sign(&self, claims: &TaskClaims) -> Result<String, TokenError> {
        encode(&Header::new(Algorithm::HS256), claims, &self.key).map_err(|_| TokenError::Key)
    }

    pub fn issue(
        &self,
        subject: &str,
        tenant_id: &str,
        task_id: &str,
        resource_id: &str,
        scopes: &[String],
    ) -> Result<String, TokenError> {
        self.sign(&self.claims(subject, tenant_id, task_id, resource_id, scopes))
    }
}

/// Verifies task tokens (the MCP server side).
#[derive(Clone)]
pub struct TokenVerifier {
    key: DecodingKey,
    validation: Validation,
    resource_field: String,
    /// Tokens that verified, by their exact text (see [`TokenVerifier::verify_shared`]).
    verified: Arc<Mutex<HashMap<String, Arc<TaskClaims>>>>,
}

/// Verified tokens kept. A task's token serves all of its calls, so a few hundred
/// cover many concurrent runs; when full, expired ones go first, then all.
const VERIFIED_KEPT: usize = 512;

impl TokenVerifier {
    /// Accepts only HS256 tokens from `issuer` whose audience is exactly `audience`
    /// (this server's resource URL).
    pub fn new(
        secret: &[u8],
        issuer: &str,
        audience: &str,
        resource_field: &str,
    ) -> Result<Self, TokenError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.algorithms = vec![Algorithm::HS256];
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "nbf", "iat", "iss", "aud", "sub"]);
        Ok(Self {
            key: DecodingKey::from_secret(secret).map_err(|_| TokenError::Key)?,
            validation,
            resource_field: resource_field.to_string(),
            verified: Arc::default(),
        })
    }

    pub fn verify(&self, token: &str) -> Result<TaskClaims, TokenError> {
        self.verify_shared(token).map(Arc::unwrap_or_clone)
    }

    /// Verifies `token`, or finds it among those that verified before. Decoding
    /// and checking a token was most of the MCP server's own cost per call, and a
    /// task sends the same token with each of its calls. A kept token is one whose
    /// exact text (signature included) verified under this key, so only the checks
    /// that depend on the time are made again.
    pub fn verify_shared(&self, token: &str) -> Result<Arc<TaskClaims>, TokenError> {
        self.verify_at(token, now())
    }

    fn verify_at(&self, token: &str, now: u64) -> Result<Arc<TaskClaims>, TokenError> {
        let kept = self
            .verified
            .lock()
            .expect("verified tokens")
            .get(token)
            .cloned();
        if let Some(claims) = kept {
            still_valid(&claims, now)?;
            return Ok(claims);
        }
        let claims = Arc::new(self.decode(token)?);
        let mut verified = self.verified.lock().expect("verified tokens");
        if verified.len() >= VERIFIED_KEPT {
            verified.retain(|_, c| still_valid(c, now).is_ok());
            if verified.len() >= VERIFIED_KEPT {
                verified.clear();
            }
        }
        verified.insert(token.to_string(), claims.clone());
        Ok(claims)
    }

    fn decode(&self, token: &str) -> Result<TaskClaims, TokenError> {
        use jsonwebtoken::errors::ErrorKind as K;
        // The header first, so that a header fault is named as one (a missing
        // `alg` would otherwise read as a missing claim).
        if let Err(e) = jsonwebtoken::decode_header(token) {
            return Err(match e.kind() {
                K::Json(j) if missing_field(&j.to_string()).as_deref() == Some("alg") => {
                    TokenError::Header("it has no `alg`".into())
                }
                K::MissingAlgorithm => TokenError::Header("it has no `alg`".into()),
                K::Json(_) | K::Base64(_) | K::Utf8(_) => {
                    TokenError::Header("it is not base64url-encoded JSON".into())
                }
                K::InvalidAlgorithmName | K::InvalidAlgorithm => TokenError::Algorithm,
                _ => TokenError::Malformed,
            });
        }
        let data = decode::<TaskClaims>(token, &self.key, &self.validation).map_err(|e| match e
            .kind()
        {
            K::InvalidSignature => TokenError::Signature,
            K::InvalidAlgorithm | K::MissingAlgorithm | K::InvalidAlgorithmName => {
                TokenError::Algorithm
            }
            K::ExpiredSignature => TokenError::Expired,
            K::ImmatureSignature => TokenError::NotYetValid,
            K::InvalidAudience => TokenError::Audience,
            K::InvalidIssuer => TokenError::Issuer,
            K::MissingRequiredClaim(c) => TokenError::MissingClaim(c.clone()),
            // A missing non-standard claim fails deserialization of the claims struct.
            K::Json(e) => match missing_field(&e.to_string()) {
                Some(c) => TokenError::MissingClaim(c),
                None => TokenError::Malformed,
            },
            _ => TokenError::Malformed,
        })?;
        let c = data.claims;
        if c.iat > now() + LEEWAY_SECONDS {
            return Err(TokenError::IssuedInFuture);
        }
        let ttl = c.exp.saturating_sub(c.iat);
        if !(MIN_TTL_SECONDS..=MAX_TTL_SECONDS).contains(&ttl) {
            return Err(TokenError::Lifetime(ttl));
        }
        for (name, value) in [
            ("tenant_id", &c.tenant_id),
            ("task_id", &c.task_id),
            ("jti", &c.jti),
        ] {
            if value.is_empty() {
                return Err(TokenError::MissingClaim(name.into()));
            }
        }
        if c.resource_id(&self.resource_field)
            .is_none_or(str::is_empty)
        {
            return Err(TokenError::MissingClaim(self.resource_field.clone()));
        }
        Ok(c)
    }
}

/// The checks of a verified token that depend on the time, with the same leeway
/// and bounds as the first verification.
fn still_valid(claims: &TaskClaims, now: u64) -> Result<(), TokenError> {
    if claims.exp.saturating_add(LEEWAY_SECONDS) < now {
        return Err(TokenError::Expired);
    }
    if claims.nbf > now + LEEWAY_SECONDS {
        return Err(TokenError::NotYetValid);
    }
    if claims.iat > now + LEEWAY_SECONDS {
        return Err(TokenError::IssuedInFuture);
    }
    Ok(())
}

fn missing_field(message: &str) -> Option<String> {
    let rest = message.split("missing field `").nth(1)?;
    Some(rest.split('`').next()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"unit-test-key";

    #[test]
    fn an_issued_token_verifies_with_every_claim() {
        let issuer = TokenIssuer::new(KEY, "iss", "http://x/mcp", "order_id", 120).unwrap();
        let token = issuer
            .issue("user", "t1", "task", "C-1", &["a:b".into(), "c:d".into()])
            .unwrap();
        let verifier = TokenVerifier::new(KEY, "iss", "http://x/mcp", "order_id").unwrap();
        let claims = verifier.verify(&token).unwrap();
        assert_eq!(
            (claims.tenant_id.as_str(), claims.resource_id("order_id")),
            ("t1", Some("C-1"))
        );
        assert!(claims.has_scope("c:d") && !claims.has_scope("c"));
        assert_eq!(claims.exp - claims.iat, 120);
    }

    fn hs256(claims: &serde_json::Value) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            claims,
            &EncodingKey::from_secret(KEY).unwrap(),
        )
        .unwrap()
    }

    /// Unpadded base64url, for a hand-made header.
    fn b64(bytes: &[u8]) -> String {
        const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n =
                chunk.iter().fold(0u32, |n, b| n << 8 | u32::from(*b)) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }

    fn standard_claims() -> serde_json::Value {
        let now = now();
        serde_json::json!({"iss": "i", "aud": "a", "sub": "u", "tenant_id": "t",
            "task_id": "k", "scope": "x:y", "iat": now, "nbf": now, "exp": now + 120,
            "jti": "j", "order_id": "C-1"})
    }

    #[test]
    fn tokens_from_other_issuers_verify_as_the_standards_allow() {
        let verifier = TokenVerifier::new(KEY, "i", "a", "order_id").unwrap();
        let mut c = standard_claims();
        c["aud"] = serde_json::json!(["another-server", "a"]);
        c["roles"] = serde_json::json!(["auditor"]);
        c["azp"] = serde_json::json!(7);
        c["exp"] = serde_json::json!(c["exp"].as_u64().unwrap() as f64);
        let claims = verifier.verify(&hs256(&c)).unwrap();
        assert_eq!(claims.aud, vec!["another-server", "a"]);
        assert_eq!(claims.resource_id("order_id"), Some("C-1"));

        c["aud"] = serde_json::json!(["another-server"]);
        assert_eq!(verifier.verify(&hs256(&c)), Err(TokenError::Audience));
        let mut c = standard_claims();
        c["exp"] = serde_json::json!(1.5e9 + 0.5);
        assert!(verifier.verify(&hs256(&c)).is_err());
    }

    #[test]
    fn a_token_without_alg_is_refused_for_its_header() {
        let verifier = TokenVerifier::new(KEY, "i", "a", "order_id").unwrap();
        let token = format!(
            "{}.{}.c2ln",
            b64(br#"{"typ":"JWT"}"#),
            b64(standard_claims().to_string().as_bytes())
        );
        assert_eq!(
            verifier.verify(&token),
            Err(TokenError::Header("it has no `alg`".into()))
        );
    }

    #[test]
    fn lifetimes_outside_30_to_600_seconds_are_refused() {
        assert_eq!(
            TokenIssuer::new(KEY, "i", "a", "order_id", 10).err(),
            Some(TokenError::Lifetime(10))
        );
        let issuer = TokenIssuer::new(KEY, "i", "a", "order_id", 300).unwrap();
        let mut c = issuer.claims("u", "t", "k", "C", &[]);
        c.exp = c.iat + 3600;
        let verifier = TokenVerifier::new(KEY, "i", "a", "order_id").unwrap();
        assert_eq!(
            verifier.verify(&issuer.sign(&c).unwrap()),
            Err(TokenError::Lifetime(3600))
        );
    }

    #[test]
    fn a_token_issued_in_the_future_is_refused() {
        let issuer = TokenIssuer::new(KEY, "i", "a", "order_id", 300).unwrap();
        let mut c = issuer.claims("u", "t", "k", "C", &[]);
        c.iat += 120;
        c.nbf = c.iat - 200;
        c.exp = c.iat + 100;
        let verifier = TokenVerifier::new(KEY, "i", "a", "order_id").unwrap();
        assert_eq!(
            verifier.verify(&issuer.sign(&c).unwrap()),
            Err(TokenError::IssuedInFuture)
        );
    }

    /// A verifier that has verified (and so keeps) a fresh 60 s token.
    fn kept_token() -> (TokenVerifier, String, Arc<TaskClaims>) {
        let issuer = TokenIssuer::new(KEY, "i", "a", "order_id", 60).unwrap();
        let token = issuer.issue("u", "t", "k", "C", &[]).unwrap();
        let verifier = TokenVerifier::new(KEY, "i", "a", "order_id").unwrap();
        let claims = verifier.verify_shared(&token).unwrap();
        (verifier, token, claims)
    }

    #[test]
    fn a_kept_token_is_refused_once_it_expires() {
        let (verifier, token, claims) = kept_token();
        let later = |s: u64| verifier.verify_at(&token, claims.iat + s);
        assert!(later(60 + LEEWAY_SECONDS).is_ok());
        assert_eq!(later(61 + LEEWAY_SECONDS), Err(TokenError::Expired));
        // Going back to a moment the token was good at still finds it good.
        assert_eq!(later(0).unwrap(), claims);
    }

    #[test]
    fn a_kept_token_is_refused_before_its_start_if_the_clock_goes_back() {
        let (verifier, token, claims) = kept_token();
        assert_eq!(
            verifier.verify_at(&token, claims.nbf - LEEWAY_SECONDS - 1),
            Err(TokenError::NotYetValid)
        );
    }

    #[test]
    fn a_kept_token_with_another_signature_is_refused() {
        let (verifier, token, _) = kept_token();
        let (signed, signature) = token.rsplit_once('.').unwrap();
        let other = if signature.starts_with('A') { 'B' } else { 'A' };
        let forged = format!("{signed}.{other}{}", &signature[1..]);
        assert_eq!(verifier.verify(&forged), Err(TokenError::Signature));
        // The same claims under another key are not the kept token either.
        let stranger = TokenIssuer::new(b"another-key", "i", "a", "order_id", 60).unwrap();
        let claims = verifier.verify(&token).unwrap();
        assert_eq!(
            verifier.verify(&stranger.sign(&claims).unwrap()),
            Err(TokenError::Signature)
        );
    }

    #[test]
    fn tokens_past_the_kept_number_still_verify_and_expired_ones_go_first() {
        let issuer = TokenIssuer::new(KEY, "i", "a", "order_id", 60).unwrap();
        let long = TokenIssuer::new(KEY, "i", "a", "order_id", 600).unwrap();
        let verifier = TokenVerifier::new(KEY, "i", "a", "order_id").unwrap();
        let first = long.issue("u", "t", "k0", "C", &[]).unwrap();
        let iat = verifier.verify_shared(&first).unwrap().iat;
        for i in 1..VERIFIED_KEPT {
            let token = issuer.issue("u", "t", &format!("k{i}"), "C", &[]).unwrap();
            verifier.verify_at(&token, iat).unwrap();
        }
        assert_eq!(verifier.verified.lock().unwrap().len(), VERIFIED_KEPT);
        // One more token, at a moment the 60 s ones have expired: they make room,
        // the 600 s one stays.
        let late = long.issue("u", "t", "late", "C", &[]).unwrap();
        verifier.verify_at(&late, iat + 70).unwrap();
        let kept: Vec<String> = {
            let verified = verifier.verified.lock().unwrap();
            let mut tasks: Vec<_> = verified.values().map(|c| c.task_id.clone()).collect();
            tasks.sort();
            tasks
        };
        assert_eq!(kept, ["k0", "late"]);
    }
}
