//! The Debian packages installed, upgraded, removed and purged with the real `dpkg`, in a
//! root the test makes (issue 46, item 2): an overlay of this Debian system (its packages
//! satisfy the dependencies, as `apt` would on a station) whose writes stay in a temporary
//! folder, entered with `chroot` in a private mount namespace. Needs root (overlay mounts,
//! chroot) and `lintian`; without root the test says so and skips, except in CI
//! (`EMPATHIC_REQUIRE_FIXTURES=1`), where it fails.
//!
//! The story: version A of the station is installed (user, groups, state folder, config
//! conffile, signing key, unit enabled); staff edit the config; the store is one an earlier
//! build left (schema one version older, sessions, an unsynced outbox); version B is
//! installed over it (config and key kept); the new build opens the store (the migration
//! applied once) and syncs the outbox exactly once to a collector; `remove` keeps the
//! state, `purge` says what it deletes and deletes it. Then the collector package on the
//! same root, and the two refusing to share one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::broker::{free_port, start_broker, start_collector};
use crate::common::central::{wait_subscribed, wait_until};
use crate::common::old_store::store_at;
use crate::common::store::{column, open_db};
use crate::common::*;

/// An overlay of `/` mounted at `merged`, its writes in `upper`; unmounted on drop.
struct Root {
    _dir: tempfile::TempDir,
    merged: PathBuf,
}

impl Root {
    fn mount() -> Result<Root, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (upper, work, merged) = (
            dir.path().join("u"),
            dir.path().join("w"),
            dir.path().join("m"),
        );
        for d in [&upper, &work, &merged] {
            std::fs::create_dir(d).map_err(|e| e.to_string())?;
        }
        let o = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o"])
            .arg(format!(
                "lowerdir=/,upperdir={},workdir={}",
                upper.display(),
                work.display()
            ))
            .arg(&merged)
            .output()
            .map_err(|e| e.to_string())?;
        if !o.status.success() {
            return Err(format!("mount -t overlay: {}", stderr(&o)));
        }
        Ok(Root { _dir: dir, merged })
    }

    /// `script` run by `sh -e` inside the root, with /proc and /dev mounted for it.
    fn sh(&self, script: &str) -> Output {
        let m = self.merged.display();
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "mount -t proc proc {m}/proc && mount --rbind /dev {m}/dev && exec chroot {m} sh -ec \"$0\""
            ))
            .arg(script)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn ok(&self, script: &str) -> String {
        let o = self.sh(script);
        assert!(
            o.status.success(),
            "in the root: {script}\n{}\n{}",
            stdout(&o),
            stderr(&o)
        );
        format!("{}{}", stdout(&o), stderr(&o))
    }

    fn path(&self, inside: &str) -> PathBuf {
        self.merged.join(inside.trim_start_matches('/'))
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.merged).status();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| stdout(&o).trim() == "0")
}

fn skip_or_fail(why: &str) {
    if std::env::var_os("EMPATHIC_REQUIRE_FIXTURES").is_some_and(|v| v == "1") {
        panic!("the package test cannot run: {why}");
    }
    eprintln!("SKIP the package test: {why}");
}

/// Builds the packages with packaging/build-debs.sh into `out` (gzip, quicker than xz:
/// the test reads them once). `packages` as the script takes them.
fn build_debs(out: &Path, version: &str, packages: &str) -> Vec<PathBuf> {
    let collector = root().join("target/collector/release/empathic");
    assert!(
        collector.is_file(),
        "no collector build at {} (make test builds it first: make collector)",
        collector.display()
    );
    let o = Command::new(root().join("packaging/build-debs.sh"))
        .env("STATION_BIN", env!("CARGO_BIN_EXE_empathic"))
        .env("COLLECTOR_BIN", &collector)
        .env("OUT", out)
        .env("VERSION", version)
        .env("PACKAGES", packages)
        .env("COMPRESS", "gzip")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "build-debs.sh: {}{}",
        stdout(&o),
        stderr(&o)
    );
    let mut debs: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect();
    debs.sort();
    debs
}

fn named<'a>(debs: &'a [PathBuf], package: &str) -> &'a Path {
    debs.iter()
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{package}_")))
        })
        .unwrap_or_else(|| panic!("no {package} package in {debs:?}"))
}

fn field(deb: &Path, name: &str) -> String {
    let o = Command::new("dpkg-deb")
        .arg("--field")
        .arg(deb)
        .arg(name)
        .output()
        .unwrap();
    stdout(&o).trim().to_string()
}

/// The packages' metadata and lintian: dependencies worked out from what the binaries link
/// (OpenCV and ALSA for the station, neither for the collector), the debug symbols filed
/// by the stripped binary's build id, and no lintian error.
fn check_packages(debs: &[PathBuf], tmp: &Path) {
    let station = named(debs, "empathic");
    let depends = field(station, "Depends");
    for lib in [
        "libopencv-videoio406",
        "libasound2",
        "libc6",
        "adduser",
        "empathic-models (=",
    ] {
        assert!(
            depends.contains(lib),
            "the station's Depends lacks {lib}: {depends}"
        );
    }
    let collector = named(debs, "empathic-collector");
    let depends = field(collector, "Depends");
    assert!(depends.contains("libc6"), "{depends}");
    for lib in ["opencv", "libasound", "onnxruntime"] {
        assert!(
            !depends.contains(lib),
            "the collector depends on {lib}: {depends}"
        );
    }
    assert_eq!(field(named(debs, "empathic-models"), "Architecture"), "all");

    // The stripped binary's build id names the debug file of empathic-dbgsym.
    let x = tmp.join("x");
    std::fs::create_dir_all(&x).unwrap();
    for (deb, dir) in [(station, "s"), (named(debs, "empathic-dbgsym"), "d")] {
        let o = Command::new("dpkg-deb")
            .arg("-x")
            .arg(deb)
            .arg(x.join(dir))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let notes = Command::new("readelf")
        .arg("-n")
        .arg(x.join("s/usr/bin/empathic"))
        .output()
        .unwrap();
    let id = stdout(&notes)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .expect("the stripped binary keeps its build id");
    let debug = x.join(format!(
        "d/usr/lib/debug/.build-id/{}/{}.debug",
        &id[..2],
        &id[2..]
    ));
    assert!(debug.is_file(), "no debug file {}", debug.display());
    assert_eq!(field(named(debs, "empathic-dbgsym"), "Build-Ids"), id);
    let sections = Command::new("readelf")
        .arg("-S")
        .arg(x.join("s/usr/bin/empathic"))
        .output()
        .unwrap();
    assert!(
        !stdout(&sections).contains(".debug_info"),
        "the shipped binary is stripped"
    );

    let o = Command::new("lintian")
        .args(["--tag-display-limit", "0"])
        .args(debs)
        .output()
        .expect("lintian (Debian package lintian, installed by scripts/setup.sh)");
    let report = format!("{}{}", stdout(&o), stderr(&o));
    let errors: Vec<&str> = report.lines().filter(|l| l.starts_with("E: ")).collect();
    assert!(errors.is_empty(), "lintian errors:\n{report}");
}

#[test]
fn the_packages_install_upgrade_remove_and_purge_with_dpkg_keeping_every_session() {
    if !is_root() {
        return skip_or_fail("it needs root (an overlay mount and chroot)");
    }
    let tmp = tempfile::tempdir().unwrap();
    let a = build_debs(
        &tmp.path().join("a"),
        "0.1.0+test1",
        "station models collector",
    );
    let b = build_debs(&tmp.path().join("b"), "0.1.0+test2", "station");
    check_packages(&a, tmp.path());

    let root = match Root::mount() {
        Ok(r) => r,
        Err(e) => return skip_or_fail(&e),
    };
    // A clean system: this machine's own install (if any) is hidden in the overlay.
    root.ok(
        "for p in empathic empathic-collector empathic-models empathic-dbgsym; do \
           if dpkg -s $p >/dev/null 2>&1; then dpkg --purge --force-all $p >/dev/null; fi; done; \
         for u in empathic empathic-collect; do if getent passwd $u >/dev/null; then userdel $u; fi; done; \
         rm -rf /etc/empathic /var/lib/empathic /var/lib/empathic-collect /debs; mkdir /debs",
    );
    for deb in a.iter().chain(&b) {
        let dir = if b.contains(deb) { "b" } else { "a" };
        std::fs::create_dir_all(root.path(&format!("/debs/{dir}"))).unwrap();
        std::fs::copy(
            deb,
            root.path(&format!(
                "/debs/{dir}/{}",
                deb.file_name().unwrap().to_str().unwrap()
            )),
        )
        .unwrap();
    }

    // 1. Install version A.
    let out = root.ok("dpkg -i /debs/a/empathic-models_*.deb /debs/a/empathic_*.deb");
    assert!(
        out.contains("empathic collect enrol STATION ed25519:"),
        "the key's public half is told: {out}"
    );
    let facts = root.ok(
        "id -nG empathic; stat -c '%a %U %G' /etc/empathic/station.toml /var/lib/empathic \
         /var/lib/empathic/keys/station.key; readlink /etc/systemd/system/multi-user.target.wants/empathic.service; \
         cat /var/lib/dpkg/info/empathic.conffiles; grep -E '^(Type|WatchdogSec)=' /lib/systemd/system/empathic.service; \
         cd / && runuser -u empathic -- empathic models verify | tail -n1",
    );
    for want in [
        "video",
        "audio",
        "640 root empathic",
        "750 empathic empathic",
        "600 empathic empathic",
        "/lib/systemd/system/empathic.service",
        "/etc/empathic/station.toml",
        "Type=notify",
        "WatchdogSec=30",
        "0 failed",
    ] {
        assert!(
            facts.contains(want),
            "after install, {want:?} missing from:\n{facts}"
        );
    }
    let key_before = std::fs::read(root.path("/var/lib/empathic/keys/station.key")).unwrap();

    // 2. Staff configure the station (the conffile edited) and the station holds a store an
    //    earlier build wrote: schema one version older, sessions, an unsynced outbox.
    let port = free_port();
    let _broker = start_broker(tmp.path(), port);
    let central = tmp.path().join("central.db");
    let mut collector = start_collector(&central, port);
    wait_subscribed(
        port,
        &[path_str(&central)],
        std::time::Duration::from_secs(20),
    );
    root.ok(&format!(
        "sed -i -e 's/^id = \"station-01\"/id = \"st-pkg\"/' -e 's|^broker = \"\"|broker = \"mqtt://127.0.0.1:{port}\"|' \
           -e 's/^security = \"sealed\"/security = \"plain\"/' -e 's/^study = \"study\"/study = \"test-study\"/' \
           /etc/empathic/station.toml"
    ));
    let newest = empathic::store::schema::MIGRATIONS.last().unwrap().0;
    let db = root.path("/var/lib/empathic/empathic.db");
    let seeded = store_at(&db, newest - 1, "st-pkg");
    root.ok("chown -R empathic:empathic /var/lib/empathic");

    // 3. Upgrade to version B over it.
    let out = root.ok("dpkg -i /debs/b/empathic_*.deb");
    assert!(
        out.contains("0.1.0+test2") && out.contains("0.1.0+test1"),
        "{out}"
    );
    let config = std::fs::read_to_string(root.path("/etc/empathic/station.toml")).unwrap();
    assert!(
        config.contains("id = \"st-pkg\""),
        "the edited conffile is kept"
    );
    assert_eq!(
        std::fs::read(root.path("/var/lib/empathic/keys/station.key")).unwrap(),
        key_before
    );

    // 4. The new build opens the store (the migration, once) and syncs the outbox, once.
    let sync = "cd / && runuser -u empathic -- empathic sync --config /etc/empathic/station.toml --until-synced --timeout 30";
    root.ok(sync);
    root.ok("cd / && runuser -u empathic -- empathic sessions list --db /var/lib/empathic/empathic.db >/dev/null");
    let conn = open_db(&db);
    let migrations: Vec<i64> = column(
        &conn,
        "SELECT count(*) FROM schema_migrations GROUP BY version ORDER BY version",
    );
    assert_eq!(
        migrations,
        vec![1; newest as usize],
        "each migration recorded once"
    );
    let sessions: Vec<String> = column(&conn, "SELECT id FROM sessions ORDER BY id");
    let mut want = seeded.sessions.clone();
    want.sort();
    assert_eq!(sessions, want, "every session kept across the upgrade");
    let states: Vec<String> = column(&conn, "SELECT state FROM outbox");
    assert!(states.iter().all(|s| s == "synced"), "{states:?}");
    drop(conn);
    let c = open_db(&central);
    wait_until("the pending sessions centrally", || {
        column::<String>(&c, "SELECT id FROM sessions WHERE station_id = 'st-pkg'").len()
            == seeded.pending_sessions.len()
    });
    root.ok(sync);
    let mut pending = seeded.pending_sessions.clone();
    pending.sort();
    assert_eq!(
        column::<String>(
            &c,
            "SELECT id FROM sessions WHERE station_id = 'st-pkg' ORDER BY id"
        ),
        pending,
        "exactly once"
    );
    let _ = collector.kill();
    let _ = collector.wait();

    // 4b. Issue 55 item 1: the dialogue app as its own user, as docs/station.md says: a
    //     user added to the package's control group drives a whole session through the
    //     service running as systemd starts it (its runtime folder 0750 empathic:empathic,
    //     RUNTIME_DIRECTORY set, the shipped config's socket_group), and reads nothing of
    //     the station's: not the config, the database, the recordings nor the keys. A user
    //     outside the group cannot connect.
    let trial = root.path("/srv/trial");
    std::fs::create_dir_all(&trial).unwrap();
    std::fs::copy(demo_session().join("video.avi"), trial.join("video.avi")).unwrap();
    std::fs::copy(
        crate::common::root().join("demo/stories/stories.jsonl"),
        trial.join("stories.jsonl"),
    )
    .unwrap();
    std::fs::copy(
        env!("CARGO_BIN_EXE_empathic-dialogue"),
        root.path("/usr/local/bin/empathic-dialogue"),
    )
    .unwrap();
    let app = root.sh(
        "chmod -R a+rX /srv/trial; \
         adduser --system --group --quiet --no-create-home robot-app; \
         adduser --quiet robot-app empathic-ctl; \
         echo \"groups of empathic: $(id -nG empathic)\"; \
         sed -i '/^\\[video\\]/,/^\\[/ s|^device = .*|device = \"/srv/trial/video.avi\"|' /etc/empathic/station.toml; \
         grep -q '^socket_group = \"empathic-ctl\"' /etc/empathic/station.toml && echo 'shipped socket_group ok'; \
         cd /; \
         runuser -u empathic -- empathic stories import /srv/trial/stories.jsonl --db /var/lib/empathic/empathic.db >/dev/null; \
         runuser -u empathic -- empathic participant consent P-APP --given --db /var/lib/empathic/empathic.db >/dev/null; \
         install -d -m 0750 -o empathic -g empathic /run/empathic; \
         runuser -u empathic -- env RUNTIME_DIRECTORY=/run/empathic EMPATHIC_LOG=warn \
           empathic run --config /etc/empathic/station.toml >/tmp/service.log 2>&1 & runner=$!; \
         for i in $(seq 300); do [ -S /run/empathic/control.sock ] && break; sleep 0.2; done; \
         echo \"socket: $(stat -c '%a %U %G' /run/empathic/control.sock) folder: $(stat -c '%a %U %G' /run/empathic)\"; \
         runuser -u empathic -- empathic doctor --live --config /etc/empathic/station.toml | grep -E 'control group|story bank' || true; \
         if runuser -u nobody -- empathic status --socket /run/empathic/control.sock >/dev/null 2>&1; \
           then echo 'NOBODY CONNECTED'; else echo 'nobody refused'; fi; \
         set +e; \
         runuser -u robot-app -- empathic-dialogue --socket /run/empathic/control.sock --participant P-APP \
           --ratings 4,2,5 --answer-s 1 --end-of-turn-ms 200 --max-turn-s 2 --read-s 1 --face-s 20 \
           --prediction-wait-s 2 --words-wait-s 1 >/tmp/dialogue.out 2>&1; \
         echo \"dialogue exit $?\"; \
         for f in /etc/empathic/station.toml /var/lib/empathic/empathic.db /var/lib/empathic/keys/station.key; do \
           if runuser -u robot-app -- cat \"$f\" >/dev/null 2>&1; then echo \"APP READ $f\"; fi; done; \
         if runuser -u robot-app -- ls /var/lib/empathic >/dev/null 2>&1; then echo 'APP LISTED the state folder'; fi; \
         svc=$(pgrep -u empathic -x empathic); kill -TERM $svc; \
         while kill -0 $svc 2>/dev/null; do sleep 0.2; done; wait $runner; echo \"service exit $?\"; \
         tail -n 20 /tmp/dialogue.out; tail -n 20 /tmp/service.log",
    );
    let said = format!("{}{}", stdout(&app), stderr(&app));
    for want in [
        "empathic-ctl",
        "shipped socket_group ok",
        "socket: 660 empathic empathic-ctl folder: 750 empathic empathic-ctl",
        "the group's members can connect",
        "stories embedded with",
        "nobody refused",
        "dialogue exit 0",
        "service exit 0",
    ] {
        assert!(
            said.contains(want),
            "the app as its own user: {want:?} missing from:\n{said}"
        );
    }
    assert!(
        !said.contains("APP READ") && !said.contains("APP LISTED"),
        "{said}"
    );
    let conn = open_db(&db);
    let app_sessions: Vec<String> = column(
        &conn,
        "SELECT status FROM sessions WHERE participant_id = 'P-APP'",
    );
    assert_eq!(app_sessions, ["complete"], "{said}");
    drop(conn);

    // 5. Remove keeps the state and the config; purge says what it deletes, and deletes it,
    //    the configured folders outside /var/lib/empathic too (issue 56): the recordings
    //    moved to /srv (the service's), a database path on a file the service does not own
    //    (kept, and said).
    root.ok(
        "mkdir -p /srv/station-rec/s-1 && echo x > /srv/station-rec/s-1/video.avi          && chown -R empathic:empathic /srv/station-rec && echo keep > /srv/not-the-station.db          && sed -i 's|^dir = \"/var/lib/empathic/recordings\"|dir = \"/srv/station-rec\"|;                     s|^db_path = .*|db_path = \"/srv/not-the-station.db\"|' /etc/empathic/station.toml",
    );
    root.ok("dpkg -r empathic");
    assert!(db.is_file(), "remove keeps the session database");
    assert!(
        root.path("/etc/empathic/station.toml").is_file(),
        "remove keeps the config"
    );
    assert!(!root.path("/usr/bin/empathic").exists());
    let out = root.ok("dpkg -P empathic");
    for want in [
        "purge deletes /var/lib/empathic",
        "the session database empathic.db",
        "station.key",
    ] {
        assert!(out.contains(want), "purge says {want:?}: {out}");
    }
    assert!(!root.path("/var/lib/empathic").exists() && !root.path("/etc/empathic").exists());
    assert!(
        out.contains("purge deletes the configured recordings folder /srv/station-rec")
            && !root.path("/srv/station-rec").exists(),
        "{out}"
    );
    assert!(
        out.contains("KEPT /srv/not-the-station.db")
            && root.path("/srv/not-the-station.db").is_file(),
        "{out}"
    );
    assert!(!root
        .path("/etc/systemd/system/multi-user.target.wants/empathic.service")
        .exists());

    // 6. The collector package: its own user and state, no sensing library; it and the
    //    station refuse to share a root (both are /usr/bin/empathic).
    root.ok("dpkg -i /debs/a/empathic-collector_*.deb");
    let facts = root.ok(
        "id -nG empathic-collect; stat -c '%a %U %G' /var/lib/empathic-collect/pages /etc/empathic/collect.toml; \
         readlink /etc/systemd/system/multi-user.target.wants/empathic-collect.service; \
         empathic collect --help | head -n1; ldd /usr/bin/empathic",
    );
    for want in [
        "750 empathic-collect empathic-collect",
        "640 root empathic-collect",
        "empathic-collect.service",
    ] {
        assert!(facts.contains(want), "{want:?} missing from:\n{facts}");
    }
    assert!(
        !facts.contains("opencv") && !facts.contains("onnxruntime"),
        "{facts}"
    );
    let clash = root.sh("dpkg -i /debs/b/empathic_*.deb");
    assert!(
        !clash.status.success(),
        "the station installed beside the collector"
    );
    assert!(
        stderr(&clash).contains("conflicts with"),
        "{}",
        stderr(&clash)
    );
    let out = root.ok("dpkg -P empathic-collector");
    assert!(
        out.contains("purge deletes /var/lib/empathic-collect"),
        "{out}"
    );
}
