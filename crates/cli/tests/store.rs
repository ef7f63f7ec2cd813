//! `situate store`: the shared store on a real PostgreSQL server with pgvector
//! (`SITUATE_TEST_PG_URL`; `scripts/test.sh` starts one from the pinned wheel).

use crate::{json, run, situate};
use postgres::{Client, NoTls};

/// A fresh database on the test server: its URL, and the server's URL to drop it with.
struct Database {
    server: String,
    name: String,
    url: String,
}

impl Database {
    fn new(tag: &str) -> Database {
        let server = std::env::var("SITUATE_TEST_PG_URL").unwrap_or_else(|_| {
            panic!(
                "SITUATE_TEST_PG_URL is not set: scripts/test.sh starts a PostgreSQL server (scripts/postgres.sh) and sets it"
            )
        });
        let name = format!("cli_{tag}_{}", std::process::id());
        let mut c = Client::connect(&server, NoTls).expect("the test server");
        // One statement each: CREATE DATABASE cannot run in a multi-statement batch.
        for sql in [
            format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            format!("CREATE DATABASE {name}"),
        ] {
            c.batch_execute(&sql).expect("a database");
        }
        let url = format!("{}/{name}", server.rsplit_once('/').expect("a database").0);
        Database { server, name, url }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.server, NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

#[test]
fn store_migrate_creates_the_shared_store_once_from_a_flag_or_the_settings() {
    let db = Database::new("migrate");
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    let out = run(
        situate(&index).args(["store", "migrate", "--store", &db.url]),
        0,
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("created the situate store at situate@"),
        "{said}"
    );
    // Again, from `[store] url` in the settings beside the index: already current.
    std::fs::write(
        tmp.path().join("situate.toml"),
        format!("[store]\nurl = \"{}\"\n", db.url),
    )
    .expect("settings");
    let v = json(situate(&index).args(["store", "migrate"]), 0);
    assert_eq!(v["outcome"], "current", "{v:#}");
    assert_eq!(v["format_version"], 1);
    assert!(
        v["postgres"].as_str().is_some_and(|p| p.starts_with("18")),
        "{v:#}"
    );
    assert!(
        v["pgvector"].as_str().is_some_and(|p| !p.is_empty()),
        "{v:#}"
    );
    assert!(
        v["store"].as_str().is_some_and(|s| s.ends_with(&db.name)),
        "{v:#}"
    );
    let mut c = Client::connect(&db.url, NoTls).expect("connect");
    let tables: i64 = c
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'situate'",
            &[],
        )
        .expect("count")
        .get(0);
    assert_eq!(tables, 7);
}

#[test]
fn store_migrate_refuses_bad_input_with_a_clear_error_and_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    let stderr = |args: &[&str]| {
        let out = run(situate(&index).args(args), 1);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // No store named.
    let err = stderr(&["store", "migrate"]);
    assert!(err.contains("no store: give --store postgres://"), "{err}");
    // Not a PostgreSQL URL.
    let err = stderr(&["store", "migrate", "--store", "mysql://u@127.0.0.1/db"]);
    assert!(err.contains("expected postgres://"), "{err}");
    // A server that is down: named, its password never shown.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let down = format!("postgres://situate:hunter2@127.0.0.1:{port}/db");
    let err = stderr(&["store", "migrate", "--store", &down]);
    assert!(
        err.contains(&format!("situate@127.0.0.1:{port}/db: cannot connect")),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    // A store of another format: refused, left as it was.
    let db = Database::new("version");
    run(
        situate(&index).args(["store", "migrate", "--store", &db.url]),
        0,
    );
    let mut c = Client::connect(&db.url, NoTls).expect("connect");
    c.execute(
        "UPDATE situate.meta SET value = '0' WHERE key = 'format_version'",
        &[],
    )
    .expect("another version");
    let err = stderr(&["store", "migrate", "--store", &db.url]);
    assert!(
        err.contains("is of format 0, this build reads format 1; nothing was written"),
        "{err}"
    );
    let v: String = c
        .query_one(
            "SELECT value FROM situate.meta WHERE key = 'format_version'",
            &[],
        )
        .expect("version")
        .get(0);
    assert_eq!(v, "0");
}
