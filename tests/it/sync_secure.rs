//! Study sync through a Mosquitto that requires TLS (a test CA; the broker's certificate
//! names 127.0.0.1), a password file and an ACL under which a station may publish only
//! below its own topic: a station and a collector with the right credentials sync exactly
//! once; a wrong password and a wrong CA are refused with a clear reason and retried with
//! backoff (not a busy loop) until the timeout; a station publishing as another station
//! is never synced (the broker drops what the ACL forbids, so no receipt comes).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::common::broker::{free_port, run_broker, Broker};
use crate::common::*;

fn run(cmd: &mut Command) {
    let o = cmd
        .output()
        .expect("openssl and mosquitto_passwd are installed by set-up");
    assert!(
        o.status.success(),
        "{:?}: {}",
        cmd,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A CA and, when `server` is set, a broker certificate for 127.0.0.1 signed by it.
fn make_ca(dir: &Path, name: &str, server: bool) -> PathBuf {
    let ca_key = dir.join(format!("{name}-ca.key"));
    let ca = dir.join(format!("{name}-ca.pem"));
    run(Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
        ])
        .arg(format!("/CN={name} test CA"))
        .arg("-keyout")
        .arg(&ca_key)
        .arg("-out")
        .arg(&ca));
    if server {
        let key = dir.join("server.key");
        let csr = dir.join("server.csr");
        let ext = dir.join("server.ext");
        std::fs::write(&ext, "subjectAltName=IP:127.0.0.1\n").unwrap();
        run(Command::new("openssl")
            .args([
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=127.0.0.1",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&csr));
        run(Command::new("openssl")
            .args(["x509", "-req", "-days", "2", "-CAcreateserial"])
            .arg("-in")
            .arg(&csr)
            .arg("-CA")
            .arg(&ca)
            .arg("-CAkey")
            .arg(&ca_key)
            .arg("-extfile")
            .arg(&ext)
            .arg("-out")
            .arg(dir.join("server.pem")));
        // Mosquitto started as root drops to its own user, which must read the test key.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    ca
}

fn start_secure_broker(dir: &Path, ca: &Path) -> Broker {
    let port = free_port();
    let passwd = dir.join("passwd");
    for (i, (user, pw)) in [("st-a", "pw-a"), ("st-b", "pw-b"), ("collector", "pw-c")]
        .iter()
        .enumerate()
    {
        let mut c = Command::new("mosquitto_passwd");
        if i == 0 {
            c.arg("-c");
        }
        run(c.arg("-b").arg(&passwd).arg(user).arg(pw));
    }
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&passwd, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let acl = dir.join("acl");
    std::fs::write(
        &acl,
        "user collector\ntopic readwrite empathic/v1/test-study/#\n\n\
         pattern readwrite empathic/v1/test-study/%u/#\n",
    )
    .unwrap();
    let conf = dir.join("secure.conf");
    std::fs::write(
        &conf,
        format!(
            "per_listener_settings false\nallow_anonymous false\npassword_file {}\nacl_file {}\n\
             persistence true\npersistence_location {}/\n\
             listener {port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\n",
            passwd.display(),
            acl.display(),
            dir.display(),
            ca.display(),
            dir.join("server.pem").display(),
            dir.join("server.key").display(),
        ),
    )
    .unwrap();
    run_broker(&conf, port)
}

fn station_db(dir: &Path) -> PathBuf {
    let db = dir.join("station.db");
    let fast = config_without_vision_models(dir);
    let o = replay_cli(&demo_session(), &db, Some(&fast));
    assert!(o.status.success(), "{}", stderr(&o));
    db
}

fn secret(dir: &Path, name: &str, value: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("{value}\n")).unwrap();
    p
}

fn sync_as(
    db: &Path,
    port: u16,
    station: &str,
    user: &str,
    pw: &Path,
    ca: &Path,
    timeout: &str,
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args([
            "sync",
            "--security",
            "plain",
            "--db",
            path_str(db),
            "--until-synced",
            "--timeout",
            timeout,
        ])
        .args([
            "--broker",
            &format!("mqtts://127.0.0.1:{port}"),
            "--study",
            "test-study",
        ])
        .args(["--station", station, "--username", user])
        .arg("--password-file")
        .arg(pw)
        .arg("--ca")
        .arg(ca)
        .env("EMPATHIC_LOG", "warn")
        .output()
        .unwrap()
}

#[test]
fn tls_passwords_and_the_acl_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = make_ca(dir, "study", true);
    let other_ca = make_ca(dir, "other", false);
    let broker = start_secure_broker(dir, &ca);
    let central = dir.join("central.db");
    let collector_pw = secret(dir, "collector.pw", "pw-c");
    let mut collector = Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args([
            "collect",
            "--security",
            "plain",
            "--central",
            path_str(&central),
        ])
        .args([
            "--broker",
            &format!("mqtts://127.0.0.1:{}", broker.port),
            "--study",
            "test-study",
        ])
        .args(["--client-id", "secure-collector", "--username", "collector"])
        .arg("--password-file")
        .arg(&collector_pw)
        .arg("--ca")
        .arg(&ca)
        .env("EMPATHIC_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let db = station_db(dir);
    let pw_a = secret(dir, "a.pw", "pw-a");

    // Wrong password: refused with the reason, retried with backoff, then given up.
    let wrong = secret(dir, "wrong.pw", "nope");
    let started = Instant::now();
    let o = sync_as(&db, broker.port, "st-a", "st-a", &wrong, &ca, "4");
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("refused the credentials") && err.contains("sync.password_file"),
        "{err}"
    );
    let attempts: u64 = err
        .split("gave up after")
        .nth(1)
        .and_then(|r| r.split(" and ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no attempt count in: {err}"));
    assert!(
        (2..=8).contains(&attempts),
        "{attempts} attempts in {:?}: {err}",
        started.elapsed()
    );

    // Wrong CA: the broker's certificate is not trusted.
    let o = sync_as(&db, broker.port, "st-a", "st-a", &pw_a, &other_ca, "3");
    let err = stderr(&o);
    assert!(
        !o.status.success() && err.contains("TLS") && err.contains("sync.ca_file"),
        "{err}"
    );

    // A station publishing under another station's topic: the ACL drops it, no receipt.
    let o = sync_as(&db, broker.port, "st-b", "st-a", &pw_a, &ca, "5");
    assert!(
        !o.status.success(),
        "published as another station: {}",
        stderr(&o)
    );

    // The right credentials: synced, exactly once at the collector.
    let o = sync_as(&db, broker.port, "st-a", "st-a", &pw_a, &ca, "60");
    assert!(o.status.success(), "{}", stderr(&o));
    let _ = collector.kill();
    let _ = collector.wait();
    let c = crate::common::store::open_db(&central);
    let rows: Vec<(String, i64)> = c
        .prepare(
            "SELECT station, count(*) FROM collect_records WHERE kind = 'session' GROUP BY station",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        rows,
        vec![("st-a".to_string(), 1)],
        "only st-a's record, once"
    );
}
