//! `empathic sync` (publish the outbox), `empathic sync status`, and the body of `participant
//! purge` (which ends with the outbox: the purge message for the collector).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use super::options::{BrokerArgs, ConfigOption, DbOption, ReadOptions};
use super::{db_path, fail, load_config, open_existing_store, print_json, Failure};
use crate::exit::ExitKind;
use crate::sync::{parse_broker, publish, SyncError, SyncOptions};

/// Publish the store's outbox (every ended session's record, and tombstones) to the
/// study's MQTT broker; `sync status` shows what is pending.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SyncArgs {
    #[command(subcommand)]
    command: Option<SyncCommand>,
    #[command(flatten)]
    db: DbOption,
    #[command(flatten)]
    config: ConfigOption,
    #[command(flatten)]
    target: BrokerArgs,
    /// Station id in the topics (default: `[station] id`).
    #[arg(long)]
    station: Option<String>,
    /// A collector (client id, or share group) that must confirm every message before it
    /// counts as synced; repeat for several (default: `[sync] collectors`; none: any
    /// one collector's receipt).
    #[arg(long = "collector", value_name = "NAME")]
    collectors: Vec<String>,
    /// Sealed (signed and sealed to the study) or plain (the broker reads everything)
    /// (default: `[sync] security`, itself sealed by default).
    #[arg(long, value_enum)]
    security: Option<crate::config::SyncSecurity>,
    /// Exit once nothing is pending (otherwise keep publishing what comes).
    #[arg(long)]
    until_synced: bool,
    /// Give up (exit 1) after this many seconds.
    #[arg(long)]
    timeout: Option<f64>,
    /// First enqueue every ended session the outbox has never announced (sessions stored
    /// before the outbox existed).
    #[arg(long)]
    backfill: bool,
    /// Send again now what a collector refused (held until the sync configuration changes,
    /// or one probe an hour): after staff put the collector's side right (enrolled this
    /// station, lifted a key mix-up).
    #[arg(long)]
    retry_refused: bool,
}

#[derive(clap::Subcommand)]
enum SyncCommand {
    /// Pending, synced, bytes waiting, last error.
    Status {
        #[command(flatten)]
        read: ReadOptions,
    },
}

impl SyncArgs {
    pub fn run(self) -> Result<ExitCode, Failure> {
        match self.command {
            Some(SyncCommand::Status { read }) => {
                status(read.db.db, read.config.path(), read.json.json)
            }
            None => push(
                self.db.db,
                self.config.path(),
                Overrides {
                    broker: self.target.broker,
                    study: self.target.study,
                    station: self.station,
                    username: self.target.username,
                    password_file: self.target.password_file,
                    ca: self.target.ca,
                    collectors: self.collectors,
                    security: self.security,
                },
                self.until_synced,
                self.timeout,
                self.backfill,
                self.retry_refused,
            ),
        }
    }
}

/// Flags over the config's `[sync]` and `[station]`.
pub struct Overrides {
    pub broker: Option<String>,
    pub study: Option<String>,
    pub station: Option<String>,
    pub username: Option<String>,
    pub password_file: Option<PathBuf>,
    pub ca: Option<PathBuf>,
    /// The collectors whose receipts make a message synced (empty: the config's).
    pub collectors: Vec<String>,
    /// Sealed or plain (None: the config's).
    pub security: Option<crate::config::SyncSecurity>,
}

/// The broker's address and the client's credentials: config, then flags.
pub(super) fn target(
    config: &crate::config::Config,
    broker: &str,
    o: &Overrides,
) -> Result<(crate::sync::BrokerAddress, crate::sync::BrokerAuth), Failure> {
    let address = parse_broker(broker).map_err(|e| (ExitKind::BadInput, e.to_string()))?;
    let mut auth = crate::sync::BrokerAuth::from_config(&config.sync, address.tls);
    if let Some(u) = &o.username {
        auth.username = Some(u.clone());
    }
    if let Some(p) = &o.password_file {
        auth.password_file = Some(p.clone());
    }
    if let Some(c) = &o.ca {
        auth.ca_file = Some(c.clone());
    }
    Ok((address, auth))
}

pub fn push(
    db: Option<PathBuf>,
    config: Option<&Path>,
    o: Overrides,
    until_synced: bool,
    timeout: Option<f64>,
    backfill: bool,
    retry_refused: bool,
) -> Result<ExitCode, Failure> {
    let mut config = load_config(config)?;
    if let Some(security) = o.security {
        config.sync.security = security;
    }
    let db = db_path(db, &config);
    // Opened (and migrated) here first so a missing or foreign file is a usage error.
    let store = open_existing_store(&db)?;
    if backfill {
        store
            .set_sync_content(&config.sync.content())
            .map_err(fail)?;
        let n = store.outbox().backfill().map_err(fail)?;
        eprintln!("sync: {n} session(s) stored before the outbox enqueued");
    }
    if retry_refused {
        let n = store.outbox().release_refused().map_err(fail)?;
        eprintln!("sync: {n} refused message(s) to be sent again");
    }
    drop(store);
    let broker = o.broker.clone().unwrap_or(config.sync.broker.clone());
    if broker.is_empty() {
        return Err((
            ExitKind::BadInput,
            "no broker: give --broker mqtt://HOST:PORT or set [sync] broker".into(),
        ));
    }
    let (address, auth) = target(&config, &broker, &o)?;
    let mut opts = SyncOptions {
        announce_status: false,
        sealing: None,
        host: address.host,
        port: address.port,
        study: o.study.unwrap_or(config.sync.study.clone()),
        station: o.station.unwrap_or(config.station.id.clone()),
        auth,
        collectors: if o.collectors.is_empty() {
            config.sync.collectors.clone()
        } else {
            o.collectors
        },
    };
    if opts.station == crate::config::DEFAULT_STATION_ID {
        return Err((
            ExitKind::BadInput,
            format!(
                "no station id: records would be published as `{}`, mixed with every other unnamed station's; set [station] id in the config or give --station",
                crate::config::DEFAULT_STATION_ID
            ),
        ));
    }
    for (what, v) in [("study", &opts.study), ("station", &opts.station)] {
        if v.is_empty() || v.contains(['/', '+', '#']) {
            return Err((
                ExitKind::BadInput,
                format!("{what} `{v}` cannot be part of an MQTT topic (empty, or has / + #)"),
            ));
        }
    }
    opts.sealing = crate::sync::Sealing::from_config(&config.sync)
        .map_err(|e| (ExitKind::BadInput, e.to_string()))?;
    if opts.sealing.is_none() {
        eprintln!("sync: WARNING: {}", crate::sync::PLAIN_WARNING);
    }
    let stop = crate::exit::stop_flag().map_err(|e| {
        (
            ExitKind::Runtime,
            format!("cannot install signal handlers: {e}"),
        )
    })?;
    let timeout = timeout.map(Duration::from_secs_f64);
    match publish(&db, &opts, until_synced, timeout, &stop) {
        Ok(outcome) => {
            eprintln!(
                "sync: {} message(s) taken by {broker}, {} confirmed by a collector, over {} connection(s)",
                outcome.published, outcome.confirmed, outcome.connections
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ (SyncError::Address(_) | SyncError::Auth(_))) => {
            Err((ExitKind::BadInput, e.to_string()))
        }
        Err(SyncError::Store(e)) => Err(fail(e)),
        Err(e) => Err((ExitKind::Runtime, format!("sync to {broker}: {e}"))),
    }
}

pub fn status(db: Option<PathBuf>, config: Option<&Path>, json: bool) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let store = open_existing_store(&db_path(db, &config))?;
    let s = store.outbox().status().map_err(fail)?;
    let security = config.sync.security;
    if json {
        let mut v = serde_json::to_value(&s).map_err(|e| (ExitKind::Runtime, e.to_string()))?;
        v["security"] = security.name().into();
        print_json(&v)?;
    } else {
        match security {
            crate::config::SyncSecurity::Sealed => {
                outln!("security  sealed (signed by this station, sealed to the study's key)")
            }
            crate::config::SyncSecurity::Plain => {
                outln!("security  PLAIN: {}", crate::sync::PLAIN_WARNING)
            }
        }
        outln!(
            "outbox    {} pending, {} sent awaiting a collector's receipt ({} bytes), {} synced",
            s.pending,
            s.sent,
            s.pending_bytes,
            s.synced
        );
        outln!("oldest    {}", s.oldest_pending.as_deref().unwrap_or("-"));
        outln!("last sync {}", s.last_synced.as_deref().unwrap_or("-"));
        outln!("last error {}", s.last_error.as_deref().unwrap_or("-"));
        if !s.receipts.is_empty() {
            let per: Vec<String> = s.receipts.iter().map(|(c, n)| format!("{c} {n}")).collect();
            outln!("receipts  {}", per.join(", "));
        }
        for line in refusal_lines(s.refused, s.quarantined, s.last_refusal.as_ref()) {
            outln!("{line}");
        }
        match &s.broker {
            Some(b) => outln!(
                "broker    {} {} since {}{}",
                b.state,
                b.broker,
                b.since,
                b.error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            ),
            None => outln!("broker    - (no sync recorded yet)"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `sync status` and `status` say of collectors' refusals: the messages held and why,
/// and those a collector keeps in quarantine.
pub(super) fn refusal_lines(
    refused: u64,
    quarantined: u64,
    last: Option<&crate::store::outbox::RefusalNote>,
) -> Vec<String> {
    let mut out = Vec::new();
    let Some(r) = last else {
        return out;
    };
    if refused > 0 {
        out.push(format!(
            "REFUSED   {refused} message(s) held: collector {} refused them ({}) at {}: {}",
            r.by, r.code, r.at, r.reason
        ));
        out.push(
            "          not sent again (but one probe an hour) until [sync] changes here or the collector's side is put right (enrolment, keys)"
                .into(),
        );
    }
    if quarantined > 0 {
        out.push(format!(
            "quarantined {quarantined} message(s) kept in the collector's quarantine (latest: {} at {}: {})",
            r.by, r.at, r.reason
        ));
    }
    out
}

/// `empathic participant purge ID`: a withdrawal leaves no byte of the participant's data
/// that this station wrote. A live session of theirs is stopped first (the service is asked
/// over its control socket); then their rows go (one transaction, with the purge message
/// for the collector), their recordings (video, audio, events) are deleted, and the
/// database is rebuilt without the deleted content.
pub fn purge(
    id: &str,
    db: Option<PathBuf>,
    config: Option<&Path>,
    study: Option<&str>,
) -> Result<ExitCode, Failure> {
    crate::session::manifest::check_id("participant id", id)
        .map_err(|m| (ExitKind::BadInput, m))?;
    let config = load_config(config)?;
    let target = db_path(db.clone(), &config);
    if is_central(&target) {
        return central_purge(id, &target.display().to_string(), study);
    }
    if study.is_some() {
        return Err((
            ExitKind::BadInput,
            if target.exists() {
                format!(
                    "--study is for a central database; {} is a station's",
                    target.display()
                )
            } else {
                format!(
                    "--study is for a central database; there is no database at {}",
                    target.display()
                )
            },
        ));
    }
    stop_live_session_of(id, &config)?;
    let store = open_existing_store(&db_path(db, &config))?;
    let Some(sessions) = store.purge_participant(id).map_err(fail)? else {
        return Err((
            ExitKind::BadInput,
            format!("no participant `{id}` in {}", store.path().display()),
        ));
    };
    let recordings = crate::capture::record::delete_recordings_of(&config.recording.dir, id)
        .map_err(|e| {
            (
                ExitKind::Runtime,
                format!("the participant's rows are purged, but not all their recordings: {e}"),
            )
        })?;
    eprintln!(
        "purge: rebuilding {} without the deleted content",
        store.path().display()
    );
    let emptied = store.erase_deleted().map_err(fail)?;
    outln!(
        "purged participant {id}: {} session(s) and {} recording(s) removed; the collector removes theirs at the next sync",
        sessions.len(),
        recordings.folders.len()
    );
    // A link is never followed (the station deletes only beneath its recordings folder):
    // what it points to may hold the participant's media, and staff must look.
    for link in &recordings.links_not_followed {
        eprintln!(
            "purge: {} is a symbolic link: not followed; whatever it points to was NOT deleted (check it by hand)",
            link.display()
        );
    }
    if !emptied {
        eprintln!(
            "purge: another process (the service?) holds {} open: its write-ahead log keeps older page versions until that process's next checkpoint",
            store.path().display()
        );
    }
    // A withdrawal that may have left media behind a link is not a clean success.
    if !recordings.links_not_followed.is_empty() {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether `target` is a central database: a PostgreSQL URL, or a SQLite file with the
/// collector's tables.
fn is_central(target: &Path) -> bool {
    let text = target.display().to_string();
    if crate::sync::central::is_postgres(&text) {
        return true;
    }
    crate::store::central::is_central_file(target)
}

/// The central side of a withdrawal (`sync::central::Central::withdraw`): exit 0 only when
/// no table holds the participant or their sessions any more.
fn central_purge(id: &str, target: &str, study: Option<&str>) -> Result<ExitCode, Failure> {
    let mut central = crate::sync::central::Central::open(target).map_err(fail)?;
    let name = crate::sync::central::redacted(target);
    let studies = central.studies_of(id).map_err(fail)?;
    let study = match (study, studies.as_slice()) {
        (Some(s), held) if held.iter().any(|h| h == s) => s.to_string(),
        // A study named for a pseudonym it never held is a typo, not a withdrawal: an
        // audit line would make it look done.
        (Some(s), held) => {
            let elsewhere = if held.is_empty() {
                "nothing of theirs is in any study there (never synced, or purged already)".to_string()
            } else {
                format!("their records are in study {}", held.join(", "))
            };
            return Err((
                ExitKind::BadInput,
                format!("no participant `{id}` in study {s} of the central database {name}: {elsewhere}; nothing was purged"),
            ));
        }
        (None, [one]) => one.clone(),
        (None, []) => {
            return Err((
                ExitKind::BadInput,
                format!("no participant `{id}` in the central database {name} (nothing of theirs was synced, or it was purged already)"),
            ))
        }
        (None, many) => {
            return Err((
                ExitKind::BadInput,
                format!(
                    "participant `{id}` is in several studies of {name} ({}): name one with --study",
                    many.join(", ")
                ),
            ))
        }
    };
    eprintln!("purge: withdrawing participant {id} from study {study} in {name}");
    let w = central.withdraw(&study, id).map_err(fail)?;
    if !w.left_in.is_empty() {
        return Err((
            ExitKind::Runtime,
            format!(
                "participant {id}: their rows were deleted, but {} still hold their id or a session of theirs; run the purge again, and report this",
                w.left_in.join(", ")
            ),
        ));
    }
    outln!(
        "withdrew participant {id} from study {study} in {name}: {} session(s), {} record(s), {} chunk(s) and {} quarantine row(s) removed; the audit line stays, and records of theirs that arrive later are dropped",
        w.sessions.len(),
        w.records,
        w.chunks,
        w.quarantined
    );
    if let Some(e) = &w.not_erased {
        eprintln!("purge: the rows are gone, but their bytes may stay in the database files until the next vacuum: {e}");
    }
    eprintln!("purge: the station still holds what it recorded of {id}: run `empathic participant purge {id}` there too (a station that is lost or revoked holds it until it is wiped)");
    Ok(ExitCode::SUCCESS)
}

/// When the station's service runs a session of participant `id`, stops it and waits until
/// it has ended (its rows are then complete and closed, ready to be purged).
fn stop_live_session_of(id: &str, config: &crate::config::Config) -> Result<(), Failure> {
    use crate::capture::control_protocol::request_ok as request;
    let socket = &config.live.socket;
    let running_for =
        |status: &serde_json::Value| status["session"]["participant_id"].as_str() == Some(id);
    if std::os::unix::net::UnixStream::connect(socket).is_err() {
        return Ok(()); // No service on this station's socket: nothing is running.
    }
    let status = request(socket, &serde_json::json!({"type": "status"})).map_err(|e| {
        (
            ExitKind::Runtime,
            format!("cannot ask the station's service whether {id} has a session running ({e}); nothing was purged"),
        )
    })?;
    if !running_for(&status) {
        return Ok(());
    }
    eprintln!("purge: stopping the running session of {id} first");
    let session_id = status["session"]["session_id"].clone();
    request(
        socket,
        &serde_json::json!({"type": "stop_session", "session_id": session_id}),
    )
    .map_err(|e| {
        (
            ExitKind::Runtime,
            format!("participant {id} has a session running and it could not be stopped: {e}"),
        )
    })?;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        match request(socket, &serde_json::json!({"type": "status"})) {
            Ok(s) if !s["session"].is_object() => return Ok(()),
            // The service went away: its session ended with it.
            Err(_) if std::os::unix::net::UnixStream::connect(socket).is_err() => return Ok(()),
            _ if std::time::Instant::now() > deadline => {
                return Err((
                    ExitKind::Runtime,
                    format!("participant {id}'s session did not end within 120 s of stop_session; nothing was purged"),
                ))
            }
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}
