//! Who may call what: API keys with two roles, and the `Host` and `Origin` checks that stop
//! a web page elsewhere from reaching a service on this machine (DNS rebinding, cross-site
//! requests).
//!
//! - **Without keys** the service listens on loopback only (starting on another address is
//!   refused) and every caller is an admin: it is the local user's own process.
//! - **With keys** every route but `/healthz` and `/readyz` needs `Authorization: Bearer
//!   KEY`; a `read` key may search and read (cards, documents, evaluations, metrics), an
//!   `admin` key may also write (jobs, review, deletion). Keys are compared by their
//!   BLAKE3 hashes (constant time) and never logged.
//! - **`Host`** must name this machine's loopback (`localhost`, `127.0.0.1`, `[::1]`), the
//!   address the service is bound to, or a name given with `--allow-host`.
//! - **`Origin`**, when a browser sends one, must be one of those hosts too.

use crate::problem::Problem;
use axum::http::{HeaderMap, Method, StatusCode, header};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Search and read.
    Read,
    /// Read, and write: jobs, context review, deletion.
    Admin,
}

/// The shortest key accepted: a guessable key is worse than none, since it opens the
/// service to the network.
pub const MIN_KEY_CHARS: usize = 16;

/// The configured API keys (hashes only).
#[derive(Debug, Clone, Default)]
pub struct Keys(Vec<(blake3::Hash, Role)>);

/// A key set that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The keys file cannot be read.
    #[error("cannot read the keys file {path}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line or a variable is not `ROLE KEY` / a good key.
    #[error("{0}")]
    Invalid(String),
}

impl Keys {
    /// No keys.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Adds a key with `role`; `from` names where it came from in errors (never the key).
    pub fn add(&mut self, key: &str, role: Role, from: &str) -> Result<(), KeyError> {
        let key = key.trim();
        if key.chars().count() < MIN_KEY_CHARS {
            return Err(KeyError::Invalid(format!(
                "{from}: a key must have at least {MIN_KEY_CHARS} characters"
            )));
        }
        if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(KeyError::Invalid(format!(
                "{from}: a key may not contain spaces or control characters"
            )));
        }
        self.0.push((blake3::hash(key.as_bytes()), role));
        Ok(())
    }

    /// Adds the keys of a file: one `read KEY` or `admin KEY` per line; blank lines and
    /// lines starting with `#` are skipped.
    pub fn add_file(&mut self, path: &Path) -> Result<(), KeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let from = format!("{} line {}", path.display(), i + 1);
            let (role, key) = line.split_once(char::is_whitespace).ok_or_else(|| {
                KeyError::Invalid(format!("{from}: expected `read KEY` or `admin KEY`"))
            })?;
            let role = match role {
                "read" => Role::Read,
                "admin" => Role::Admin,
                other => {
                    return Err(KeyError::Invalid(format!(
                        "{from}: the role must be `read` or `admin`, not {other:?}"
                    )));
                }
            };
            self.add(key, role, &from)?;
        }
        Ok(())
    }

    /// Adds comma-separated keys from the environment variable `var`, if set.
    pub fn add_env(&mut self, var: &str, role: Role) -> Result<(), KeyError> {
        if let Ok(v) = std::env::var(var) {
            for key in v.split(',').filter(|k| !k.trim().is_empty()) {
                self.add(key, role, var)?;
            }
        }
        Ok(())
    }

    /// The role of `key`, if it is one of ours.
    fn role_of(&self, key: &str) -> Option<Role> {
        let h = blake3::hash(key.as_bytes());
        // `blake3::Hash` compares in constant time; every key is compared, so the time
        // does not tell which matched either. The highest role wins if a key is listed twice.
        let mut found = None;
        for (k, role) in &self.0 {
            if *k == h {
                found = found.max(Some(*role));
            }
        }
        found
    }
}

/// The hosts a request may name in `Host` and `Origin`.
#[derive(Debug, Clone)]
pub struct Hosts {
    names: Vec<String>,
    any: bool,
    origins: Vec<String>,
}

impl Hosts {
    /// Loopback, the bound address (unless it is unspecified, `0.0.0.0`), and `extra`
    /// (`*` allows any host: for a service behind a proxy that checks it).
    pub fn new(bound: SocketAddr, extra: &[String]) -> Hosts {
        let mut names: Vec<String> = ["localhost", "127.0.0.1", "::1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        if !bound.ip().is_unspecified() {
            names.push(bound.ip().to_string());
        }
        let mut any = false;
        for e in extra {
            if e == "*" {
                any = true;
            } else {
                names.push(e.trim().to_ascii_lowercase());
            }
        }
        Hosts {
            names,
            any,
            origins: Vec::new(),
        }
    }

    /// Also accepts requests from these web origins (`https://app.example:8443`): the
    /// pages CORS is configured for.
    pub fn with_origins(mut self, origins: &[String]) -> Hosts {
        self.origins = origins
            .iter()
            .map(|o| o.trim_end_matches('/').to_string())
            .collect();
        self
    }

    fn allows(&self, host: &str) -> bool {
        self.any || self.names.iter().any(|n| n == host)
    }
}

/// The host name of a `Host` value (`name:port`, `[v6]:port`), lowercased.
fn host_name(authority: &str) -> Option<String> {
    let a = authority.trim().to_ascii_lowercase();
    if a.is_empty() {
        return None;
    }
    if let Some(rest) = a.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return inside.parse::<IpAddr>().ok().map(|ip| ip.to_string());
    }
    match a.rsplit_once(':') {
        Some((name, port)) if is_port(port) && !name.contains(':') => Some(name.to_string()),
        Some(_) => None,
        None => Some(a),
    }
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

/// The role a route needs: none for the probes, admin for jobs, read for reading (and
/// searching, which is a POST), admin for every other write.
pub fn role_needed(method: &Method, path: &str) -> Option<Role> {
    // The probes, the API's description, and the web page's login and static files (no
    // data in any of them).
    if matches!(
        path,
        "/healthz"
            | "/readyz"
            | "/openapi.json"
            | "/ui/login"
            | "/ui/logout"
            | "/ui/app.css"
            | "/ui/app.js"
    ) {
        return None;
    }
    // The MCP endpoint reads with a read key; its write tools check for admin themselves.
    if path == "/mcp" || path.starts_with("/mcp/") {
        return Some(Role::Read);
    }
    // Jobs are writes, and their list shows what admins did.
    if path == "/v1/jobs" || path.starts_with("/v1/jobs/") {
        return Some(Role::Admin);
    }
    if method == Method::GET || method == Method::HEAD || path == "/v1/search" {
        return Some(Role::Read);
    }
    Some(Role::Admin)
}

/// The cookie the web page's login sets.
pub const KEY_COOKIE: &str = "situate_key";

/// The value of cookie `name`.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// Whether `key` is one of the configured keys (for the login form).
pub fn role_of_key(keys: &Keys, key: &str) -> Option<Role> {
    keys.role_of(key.trim())
}

/// The detail of a request whose key is not one of the configured keys.
pub const WRONG_KEY: &str = "the API key is not valid";

/// The caller's address, when the connection has one (the guard puts it on every request;
/// MCP over stdio has none).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub Option<IpAddr>);

/// Wrong keys by caller address: after [`Failures::LIMIT`] in a window of
/// [`Failures::WINDOW`], the address is answered `429 too-many-failures` until the window
/// ends, without its key being checked. Each wrong key is logged with the address and the
/// route, never the key.
#[derive(Debug, Default)]
pub struct Failures(std::sync::Mutex<std::collections::HashMap<IpAddr, (u32, std::time::Instant)>>);

impl Failures {
    /// Wrong keys allowed from one address in a window.
    pub const LIMIT: u32 = 10;
    /// The window.
    pub const WINDOW: std::time::Duration = std::time::Duration::from_secs(60);
    /// Addresses remembered at most (older windows are dropped first).
    const MAX_ADDRESSES: usize = 10_000;

    /// How long `ip` is still refused, if it is.
    pub fn blocked(&self, ip: IpAddr) -> Option<std::time::Duration> {
        let map = self.0.lock().ok()?;
        let (count, since) = map.get(&ip)?;
        let left = Self::WINDOW.checked_sub(since.elapsed())?;
        (*count >= Self::LIMIT).then_some(left)
    }

    /// Records a wrong key from `ip`; returns how many in its window.
    pub fn record(&self, ip: IpAddr) -> u32 {
        let Ok(mut map) = self.0.lock() else {
            return 0;
        };
        if map.len() >= Self::MAX_ADDRESSES {
            map.retain(|_, (_, since)| since.elapsed() < Self::WINDOW);
        }
        let entry = map.entry(ip).or_insert((0, std::time::Instant::now()));
        if entry.1.elapsed() >= Self::WINDOW {
            *entry = (0, std::time::Instant::now());
        }
        entry.0 += 1;
        entry.0
    }

    /// The answer to a refused address.
    pub fn refusal(left: std::time::Duration) -> Problem {
        Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too-many-failures",
            format!(
                "too many wrong API keys from this address: try again in {} s",
                left.as_secs().max(1)
            ),
        )
    }
}

/// Checks `Host`, `Origin` and the key of one request; returns the caller's role.
pub fn check(
    keys: &Keys,
    hosts: &Hosts,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Result<Role, Problem> {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(host_name);
    match host {
        Some(h) if hosts.allows(&h) => {}
        Some(h) => {
            return Err(Problem::new(
                StatusCode::FORBIDDEN,
                "host-not-allowed",
                format!("Host {h:?} is not this service (allow it with --allow-host)"),
            ));
        }
        None => {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "host-not-allowed",
                "the request has no valid Host header",
            ));
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let o = origin.to_str().unwrap_or("");
        let name = o
            .split_once("://")
            .filter(|(scheme, _)| *scheme == "http" || *scheme == "https")
            .and_then(|(_, rest)| host_name(rest));
        if !name.is_some_and(|n| hosts.allows(&n)) && !hosts.origins.iter().any(|c| c == o) {
            return Err(Problem::new(
                StatusCode::FORBIDDEN,
                "origin-not-allowed",
                format!("requests from the web origin {o:?} are not allowed"),
            ));
        }
    }
    let Some(needed) = role_needed(method, path) else {
        return Ok(Role::Read);
    };
    if keys.is_empty() {
        return Ok(Role::Admin);
    }
    // A bearer key; else, for the web page, the key the login form put in a cookie
    // (HttpOnly, SameSite=Strict: other sites' pages cannot send it).
    let key = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, key) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
        })
        .or_else(|| cookie(headers, KEY_COOKIE));
    let Some(key) = key else {
        return Err(Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send an API key as `Authorization: Bearer KEY`",
        ));
    };
    match keys.role_of(key) {
        None => Err(Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            WRONG_KEY,
        )),
        Some(role) if role < needed => Err(Problem::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this route needs an admin key",
        )),
        Some(role) => Ok(role),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                header::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                v.parse().expect("value"),
            );
        }
        h
    }

    fn local() -> Hosts {
        Hosts::new("127.0.0.1:7878".parse().expect("addr"), &[])
    }

    #[test]
    fn host_names_are_parsed_with_and_without_ports() {
        assert_eq!(host_name("LocalHost:7878").as_deref(), Some("localhost"));
        assert_eq!(host_name("127.0.0.1").as_deref(), Some("127.0.0.1"));
        assert_eq!(host_name("[::1]:80").as_deref(), Some("::1"));
        assert_eq!(host_name("[::1]x"), None);
        assert_eq!(host_name("a:b:c"), None);
        assert_eq!(host_name("evil.example:99999999"), None);
        assert_eq!(host_name(""), None);
    }

    #[test]
    fn without_keys_loopback_callers_are_admins_and_other_hosts_are_refused() {
        let keys = Keys::default();
        let ok = headers(&[("host", "localhost:7878")]);
        assert_eq!(
            check(&keys, &local(), &Method::DELETE, "/v1/documents/x", &ok).expect("ok"),
            Role::Admin
        );
        let rebound = headers(&[("host", "attacker.example:7878")]);
        let p = check(&keys, &local(), &Method::GET, "/v1/info", &rebound).expect_err("host");
        assert_eq!(
            (p.status, p.code),
            (StatusCode::FORBIDDEN, "host-not-allowed")
        );
        let p = check(&keys, &local(), &Method::GET, "/healthz", &HeaderMap::new())
            .expect_err("no host");
        assert_eq!(p.code, "host-not-allowed");
        let cross = headers(&[
            ("host", "127.0.0.1:7878"),
            ("origin", "https://attacker.example"),
        ]);
        let p = check(&keys, &local(), &Method::POST, "/v1/search", &cross).expect_err("origin");
        assert_eq!(
            (p.status, p.code),
            (StatusCode::FORBIDDEN, "origin-not-allowed")
        );
        let same = headers(&[
            ("host", "127.0.0.1:7878"),
            ("origin", "http://127.0.0.1:7878"),
        ]);
        assert!(check(&keys, &local(), &Method::POST, "/v1/search", &same).is_ok());
        let allowed = Hosts::new(
            "0.0.0.0:7878".parse().expect("addr"),
            &["Search.Lan".into()],
        );
        assert!(
            check(
                &keys,
                &allowed,
                &Method::GET,
                "/v1/info",
                &headers(&[("host", "search.lan")])
            )
            .is_ok()
        );
        assert!(
            check(
                &keys,
                &allowed,
                &Method::GET,
                "/v1/info",
                &headers(&[("host", "0.0.0.0")])
            )
            .is_err()
        );
    }

    #[test]
    fn keys_have_roles_and_the_probes_need_none() {
        let mut keys = Keys::default();
        keys.add("read-key-0123456789", Role::Read, "test")
            .expect("add");
        keys.add("admin-key-0123456789", Role::Admin, "test")
            .expect("add");
        assert!(keys.add("short", Role::Read, "test").is_err());
        let h = |k: &str| headers(&[("host", "localhost"), ("authorization", k)]);
        let hosts = local();
        let none = headers(&[("host", "localhost")]);
        assert!(check(&keys, &hosts, &Method::GET, "/healthz", &none).is_ok());
        let p = check(&keys, &hosts, &Method::GET, "/v1/info", &none).expect_err("no key");
        assert_eq!(
            (p.status, p.code),
            (StatusCode::UNAUTHORIZED, "unauthorized")
        );
        let p = check(
            &keys,
            &hosts,
            &Method::GET,
            "/v1/info",
            &h("Bearer wrong-key-0123456789"),
        )
        .expect_err("wrong key");
        assert_eq!(p.status, StatusCode::UNAUTHORIZED);
        let read = h("Bearer read-key-0123456789");
        assert_eq!(
            check(&keys, &hosts, &Method::POST, "/v1/search", &read).expect("search"),
            Role::Read
        );
        let p = check(&keys, &hosts, &Method::DELETE, "/v1/documents/a", &read).expect_err("admin");
        assert_eq!((p.status, p.code), (StatusCode::FORBIDDEN, "forbidden"));
        let admin = h("bearer admin-key-0123456789");
        assert_eq!(
            check(&keys, &hosts, &Method::DELETE, "/v1/documents/a", &admin).expect("admin"),
            Role::Admin
        );
    }

    #[test]
    fn a_keys_file_names_its_bad_line_and_never_the_key() {
        let dir = tempfile::tempdir().expect("tmp");
        let f = dir.path().join("keys");
        std::fs::write(
            &f,
            "# team keys\nread abcdefghijklmnop\n\nwriter s3cr3t-s3cr3t-s3cr3t\n",
        )
        .expect("w");
        let e = Keys::default()
            .add_file(&f)
            .expect_err("bad role")
            .to_string();
        assert!(e.contains("line 4") && e.contains("writer"), "{e}");
        assert!(!e.contains("s3cr3t"), "{e}");
        std::fs::write(&f, "read abcdefghijklmnop\nadmin ABCDEFGHIJKLMNOP\n").expect("w");
        let mut k = Keys::default();
        k.add_file(&f).expect("good");
        assert_eq!(k.len(), 2);
        assert_eq!(k.role_of("ABCDEFGHIJKLMNOP"), Some(Role::Admin));
    }
}
