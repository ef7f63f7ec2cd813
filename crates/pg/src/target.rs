//! Where the store is: a `postgres://` URL with what the `PG*` variables fill in, shown
//! without its password.

use crate::*;

/// The `PG*` environment variables a URL's missing parts are taken from, as libpq does.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `PGHOST`.
    pub host: Option<String>,
    /// `PGPORT`.
    pub port: Option<String>,
    /// `PGUSER`.
    pub user: Option<String>,
    /// `PGPASSWORD`.
    pub password: Option<String>,
    /// `PGDATABASE`.
    pub database: Option<String>,
}

impl Env {
    /// The variables of this process.
    pub fn from_process() -> Env {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Env {
            host: var("PGHOST"),
            port: var("PGPORT"),
            user: var("PGUSER"),
            password: var("PGPASSWORD"),
            database: var("PGDATABASE"),
        }
    }
}

/// A store URL parsed: the client's configuration and the server named for messages.
#[derive(Clone)]
pub struct Target {
    pub(crate) config: Config,
    pub(crate) shown: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The configuration holds the password: only the server's name is shown.
        f.debug_tuple("Target").field(&self.shown).finish()
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// `url` with the password of its user-info part replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// Where a port would go in `url`: the end of its one host, when it names a host without
/// a port (`None` for no host, a port given, or several hosts).
pub(crate) fn host_without_port(url: &str) -> Option<usize> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let end = start + rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &url[start..end];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let has_port = if host.starts_with('[') {
        !host.ends_with(']')
    } else {
        host.contains(':')
    };
    (!host.is_empty() && !has_port && !host.contains(',')).then_some(end)
}

impl Target {
    /// Parses a `postgres://` (or `postgresql://`) URL, filling what it leaves out from
    /// `env` (host, port, user, password, database). Only loopback and Unix-socket servers
    /// are reached without TLS, which this build does not have yet: a `sslmode` other than
    /// `disable`/`prefer` is refused rather than silently ignored.
    pub fn parse(url: &str, env: &Env) -> Result<Target> {
        let bad = |reason: String| PgError::Url {
            url: redact(url),
            reason,
        };
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(bad(
                "expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE".to_string(),
            ));
        }
        if let Some(p) = &env.port {
            p.parse::<u16>()
                .map_err(|_| bad(format!("PGPORT {p:?} is not a port number")))?;
        }
        // The client's URL parser gives a host without a port 5432 at once, so PGPORT is
        // put into the URL itself when its host has none (libpq's rule).
        let with_port = match (&env.port, host_without_port(url)) {
            (Some(p), Some(end)) => format!("{}:{p}{}", &url[..end], &url[end..]),
            _ => url.to_string(),
        };
        let mut config: Config = with_port
            .parse()
            .map_err(|e: postgres::Error| bad(e.to_string()))?;
        if config.get_ssl_mode() == postgres::config::SslMode::Require {
            return Err(bad(
                "sslmode=require: this build has no TLS client for PostgreSQL yet; reach the server over loopback, a Unix socket or an SSH tunnel".to_string(),
            ));
        }
        if config.get_hosts().is_empty() {
            config.host(env.host.as_deref().unwrap_or("localhost"));
        }
        if config.get_ports().is_empty()
            && let Some(port) = env.port.as_deref().and_then(|p| p.parse().ok())
        {
            config.port(port);
        }
        if config.get_user().is_none() {
            match &env.user {
                Some(u) => {
                    config.user(u);
                }
                None => {
                    return Err(bad(
                        "no user: give one in the URL (postgres://USER@HOST/DATABASE) or in PGUSER"
                            .to_string(),
                    ));
                }
            }
        }
        if config.get_password().is_none()
            && let Some(p) = &env.password
        {
            config.password(p);
        }
        if config.get_dbname().is_none() {
            let db = env
                .database
                .clone()
                .or_else(|| config.get_user().map(str::to_string))
                .unwrap_or_default();
            config.dbname(&db);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let host = match config.get_hosts().first() {
            Some(postgres::config::Host::Tcp(h)) => h.clone(),
            #[cfg(unix)]
            Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
            None => "localhost".to_string(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let shown = format!(
            "{}@{host}:{port}/{}",
            config.get_user().unwrap_or_default(),
            config.get_dbname().unwrap_or_default()
        );
        Ok(Target { config, shown })
    }

    pub(crate) fn client(&self) -> Result<Client> {
        self.config
            .connect(NoTls)
            .map_err(|source| PgError::Connect {
                target: self.shown.clone(),
                source,
            })
    }
}
