//! A real PostgreSQL (Debian's `postgresql`, installed by set-up) in a throwaway cluster:
//! a temporary folder, a free loopback port, trust authentication for user `test`, stopped
//! (immediately) and removed when dropped. PostgreSQL refuses to run as root, so as root the
//! cluster runs as the packaged `postgres` user (`runuser`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
}

fn as_owner(bin: &Path, tool: &str) -> Command {
    let root = unsafe_free_uid() == 0;
    let mut c = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join(tool));
        c
    } else {
        Command::new(bin.join(tool))
    };
    c.env_remove("PGDATA");
    c
}

fn unsafe_free_uid() -> u32 {
    // The owner of /proc/self is the process's user.
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
}

fn server_bin() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed by scripts/setup.sh (Debian package `postgresql`)")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("initdb").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("no /usr/lib/postgresql/*/bin/initdb: install the Debian package `postgresql`")
}

impl Postgres {
    /// The cluster's data folder (to look at its raw files).
    #[allow(dead_code)] // the tests use it; the benchmarks that share this module do not
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Makes and starts a cluster (about 3 s).
    pub fn start() -> Postgres {
        let bin = server_bin();
        let dir = tempfile::Builder::new()
            .prefix("empathic-pg-")
            .tempdir()
            .unwrap();
        if unsafe_free_uid() == 0 {
            let ok = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap()
                .success();
            assert!(ok, "cannot give the cluster folder to the postgres user");
        }
        let data = dir.path().join("data");
        let o = as_owner(&bin, "initdb")
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "test", "--no-sync"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let port = super::broker::free_port();
        let o = as_owner(&bin, "pg_ctl")
            .arg("-D")
            .arg(&data)
            .arg("-o")
            .arg(format!(
                "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
                dir.path().display()
            ))
            .arg("-l")
            .arg(dir.path().join("log"))
            .args(["-w", "start"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "pg_ctl start: {}{}",
            String::from_utf8_lossy(&o.stderr),
            std::fs::read_to_string(dir.path().join("log")).unwrap_or_default()
        );
        let pg = Postgres { dir, bin, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while postgres::Client::connect(&pg.url(), postgres::NoTls).is_err() {
            assert!(
                Instant::now() < deadline,
                "PostgreSQL did not accept connections"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        pg
    }

    /// `postgres://test@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://test@127.0.0.1:{}/postgres", self.port)
    }

    /// A fresh database in the cluster, by URL.
    pub fn database(&self, name: &str) -> String {
        let mut c = postgres::Client::connect(&self.url(), postgres::NoTls).unwrap();
        c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        format!("postgres://test@127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = as_owner(&self.bin, "pg_ctl")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "stop"])
            .output();
    }
}
