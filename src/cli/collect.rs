//! `empathic collect` (receive every station's sync into the central database) and its
//! `enrol`, `revoke` and `stations` subcommands (which stations it lets in).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::options::{BrokerArgs, ConfigOption};
use super::sync::{target, Overrides};
use super::{fail, load_config, print_json, Failure};
use crate::exit::ExitKind;

/// For study staff: receive every station's sync messages into the central database
/// (a SQLite file, or PostgreSQL), exactly once (until SIGINT/SIGTERM); `collect enrol`,
/// `revoke` and `stations` say which stations it lets in.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<CollectCommand>,
    #[command(flatten)]
    central: CentralOption,
    #[command(flatten)]
    config: ConfigOption,
    #[command(flatten)]
    target: BrokerArgs,
    /// The collector's MQTT client id (stable: the broker keeps its session).
    #[arg(long, default_value = "empathic-collector")]
    client_id: String,
    /// Share the study's messages among the collectors of this group (an MQTT shared
    /// subscription: each message goes to one of them); each needs its own client id.
    #[arg(long)]
    share_group: Option<String>,
    /// `sealed`: take signed, sealed messages from enrolled stations (and plain ones only
    /// from stations enrolled with --allow-plain); `plain`: also take plain messages from
    /// any station (a first try: the broker reads them, and anyone it lets in can forge).
    #[arg(long, value_enum, default_value = "sealed")]
    security: crate::config::SyncSecurity,
    /// The study's secret sealing key (`empathic keys init study`), which opens sealed
    /// payloads; required with --security sealed.
    #[arg(long, default_value = "keys/study.key")]
    study_key: PathBuf,
    /// This collector's signing key (`empathic keys init collector`), which signs its
    /// receipts; required with --security sealed.
    #[arg(long, default_value = "keys/collector.key")]
    signing_key: PathBuf,
    /// Keep the study page (`empathic study report`) current in this file: rewritten
    /// (beside, then renamed) at most once a minute after new records or health, and every
    /// 10 minutes; `[study]` is its plan, `[collect] on_problem` alerts on new problems.
    #[arg(long)]
    study_page: Option<PathBuf>,
}

/// `--db FILE` or `--central URL`: the central database.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CentralOption {
    /// The central SQLite file (`collect` creates it when missing; the other commands read
    /// it with `--db FILE`).
    #[arg(long, conflicts_with = "central", required_unless_present = "central")]
    db: Option<PathBuf>,
    /// The central database as `postgres://USER@HOST:PORT/DB` (or a SQLite file); the
    /// other commands read it with `--db postgres://...`.
    #[arg(long)]
    central: Option<String>,
}

impl CentralOption {
    pub(super) fn target(&self) -> String {
        self.central
            .clone()
            .or(self.db.as_ref().map(|d| d.to_string_lossy().into_owned()))
            .unwrap_or_default()
    }
}

#[derive(clap::Subcommand)]
enum CollectCommand {
    /// Let a station in: its public signing key (`ed25519:...`, printed by `empathic keys
    /// init station` on it), and/or --allow-plain for a study changing over to sealed sync.
    Enrol {
        /// The station id (`[station] id` on it).
        station: String,
        /// Its public signing key; enrol a second one to rotate, then revoke the first.
        key: Option<String>,
        /// Also take its plain (unsigned) messages, during a changeover.
        #[arg(long)]
        allow_plain: bool,
        #[command(flatten)]
        central: CentralOption,
        #[command(flatten)]
        config: ConfigOption,
        /// Study name (default: `[sync] study`).
        #[arg(long)]
        study: Option<String>,
    },
    /// Stop letting in a station's key (after a rotation), or everything from a stolen
    /// station: what was stored from it stays; what it sends later is quarantined.
    Revoke {
        /// The station id.
        station: String,
        /// Only this key (default: every key of the station, and its plain allowance).
        #[arg(long)]
        key: Option<String>,
        #[command(flatten)]
        central: CentralOption,
        #[command(flatten)]
        config: ConfigOption,
        /// Study name (default: `[sync] study`).
        #[arg(long)]
        study: Option<String>,
    },
    /// Every station's enrolments, and what arrived from it: sealed and plain records,
    /// quarantined messages.
    Stations {
        #[command(flatten)]
        central: CentralOption,
        #[command(flatten)]
        config: ConfigOption,
        /// Study name (default: `[sync] study`).
        #[arg(long)]
        study: Option<String>,
        #[command(flatten)]
        json: super::options::JsonOption,
    },
    /// Fill a new or second central database (SQLite file or PostgreSQL) with what another
    /// one holds, verified: withdrawals, and every record whose station's signature
    /// verifies with a key the target enrols, through the same rules (what it holds already
    /// is kept; nothing is stored twice; run it again at will).
    Copy {
        /// The central database to read (a SQLite file or `postgres://...`).
        #[arg(long)]
        from: String,
        /// The central database to fill (created when it is a missing file).
        #[arg(long)]
        into: String,
        /// Only this study (default: every study the source holds).
        #[arg(long)]
        study: Option<String>,
        /// Also copy the source's station enrolments (and revocations): the source's word
        /// decides which keys the target trusts.
        #[arg(long)]
        with_enrolments: bool,
        /// Also copy unsigned (plain sync) records, which nothing can verify, on the
        /// source's word.
        #[arg(long)]
        accept_unsigned: bool,
        #[command(flatten)]
        json: super::options::JsonOption,
    },
    /// What this collector refused, per message with its reason (`list`), and forgetting
    /// one (`drop`).
    Quarantine {
        #[command(subcommand)]
        action: QuarantineAction,
    },
}

#[derive(clap::Subcommand)]
enum QuarantineAction {
    /// The open quarantine: each refused message (id, topic, rows, first and last time,
    /// the latest reason), never its content. A message stored after all (the station
    /// enrolled late, its resend taken) is no longer listed.
    List {
        #[command(flatten)]
        central: CentralOption,
        #[command(flatten)]
        config: ConfigOption,
        /// Study name (default: `[sync] study`).
        #[arg(long)]
        study: Option<String>,
        #[command(flatten)]
        json: super::options::JsonOption,
    },
    /// Forget one quarantined message (its id as `list` shows it); its problem on the
    /// study page clears. A message read whole is judged again if the station sends it
    /// again.
    Drop {
        /// The message id (or `row:N`) as `collect quarantine list` shows it.
        id: String,
        #[command(flatten)]
        central: CentralOption,
        #[command(flatten)]
        config: ConfigOption,
        /// Study name (default: `[sync] study`).
        #[arg(long)]
        study: Option<String>,
    },
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        match self.command {
            Some(CollectCommand::Enrol {
                station,
                key,
                allow_plain,
                central,
                config,
                study,
            }) => {
                let (mut db, study) = open_central(&central, config.path(), study, false)?;
                db.enrol(&study, &station, key.as_deref(), allow_plain)
                    .map_err(fail)?;
                outln!(
                    "enrolled station {station} of study {study}{}{}",
                    key.map(|k| format!(" with key {k}")).unwrap_or_default(),
                    if allow_plain {
                        " (plain messages allowed)"
                    } else {
                        ""
                    }
                );
                Ok(ExitCode::SUCCESS)
            }
            Some(CollectCommand::Revoke {
                station,
                key,
                central,
                config,
                study,
            }) => {
                let (mut db, study) = open_central(&central, config.path(), study, true)?;
                let n = db.revoke(&study, &station, key.as_deref()).map_err(fail)?;
                if n == 0 {
                    return Err((
                        ExitKind::BadInput,
                        format!("station {station} of study {study} has no enrolment in force to revoke"),
                    ));
                }
                outln!("revoked {n} enrolment(s) of station {station}: its later messages are quarantined, what was stored stays");
                Ok(ExitCode::SUCCESS)
            }
            Some(CollectCommand::Quarantine { action }) => quarantine(action),
            Some(CollectCommand::Copy {
                from,
                into,
                study,
                with_enrolments,
                accept_unsigned,
                json,
            }) => copy(
                &from,
                &into,
                &crate::sync::central::CopyOptions {
                    study,
                    with_enrolments,
                    accept_unsigned,
                },
                json.json,
            ),
            Some(CollectCommand::Stations {
                central,
                config,
                study,
                json,
            }) => {
                let (mut db, study) = open_central(&central, config.path(), study, true)?;
                let enrolments = db.enrolments(&study).map_err(fail)?;
                let counts = db.station_counts(&study).map_err(fail)?;
                let health = db.station_health(&study).map_err(fail)?;
                if json.json {
                    print_json(&serde_json::json!({
                        "study": study,
                        "enrolments": enrolments,
                        "received": counts,
                        "health": health,
                    }))?;
                    return Ok(ExitCode::SUCCESS);
                }
                outln!("enrolments of study {study}:");
                for e in &enrolments {
                    // Printable: an enrolment an older build took may hold any text.
                    outln!(
                        "  {:<16} {:<56} {}{}",
                        crate::sync::health::printable(&e.station, 64),
                        if e.key.is_empty() {
                            "(plain allowed)"
                        } else {
                            e.key.as_str()
                        },
                        e.enrolled_at,
                        e.revoked_at
                            .as_deref()
                            .map(|r| format!(" REVOKED {r}"))
                            .unwrap_or_default()
                    );
                }
                outln!("received (sessions shown; messages sealed / PLAIN, every version, tombstones and purges included; open quarantined messages):");
                let (known, strangers): (Vec<_>, Vec<_>) = counts.iter().partition(|c| {
                    c.sealed + c.plain > 0
                        || enrolments.iter().any(|e| e.station == c.station)
                        || health.iter().any(|h| h.station == c.station)
                });
                if !strangers.is_empty() {
                    outln!(
                        "  (not listed: {} message(s) refused from {} sender(s) that are no station of this study)",
                        strangers.iter().map(|c| c.quarantined).sum::<i64>(),
                        strangers.len()
                    );
                }
                for c in known {
                    outln!(
                        "  {:<16} {}; {} / {}{}; {}",
                        crate::sync::health::printable(&c.station, 64),
                        c.sessions,
                        c.sealed,
                        c.plain,
                        if c.plain > 0 {
                            " (readable by the broker)"
                        } else {
                            ""
                        },
                        c.quarantined
                    );
                }
                outln!("health (status; latest health message: camera, microphone, free disk, outbox):");
                for h in &health {
                    outln!("  {}", health_line(h));
                }
                Ok(ExitCode::SUCCESS)
            }
            None => collect(
                &self.central.target(),
                self.config.path(),
                Overrides {
                    broker: self.target.broker,
                    study: self.target.study,
                    station: None,
                    username: self.target.username,
                    password_file: self.target.password_file,
                    ca: self.target.ca,
                    collectors: Vec::new(),
                    security: Some(self.security),
                },
                &self.client_id,
                self.share_group.as_deref(),
                &self.study_key,
                &self.signing_key,
                self.study_page,
            ),
        }
    }
}

/// The central database and the study a `collect` subcommand works on.
pub(super) fn open_central(
    central: &CentralOption,
    config: Option<&Path>,
    study: Option<String>,
    must_hold: bool,
) -> Result<(crate::sync::central::Central, String), Failure> {
    open_central_with(central, &load_config(config)?, study, must_hold)
}

/// [`open_central`] with the config already loaded.
/// With `must_hold`, a study the database does not hold while it holds others is refused
/// (every command but `enrol`, which adds one).
pub(super) fn open_central_with(
    central: &CentralOption,
    config: &crate::config::Config,
    study: Option<String>,
    must_hold: bool,
) -> Result<(crate::sync::central::Central, String), Failure> {
    let study = study.unwrap_or(config.sync.study.clone());
    let mut db = crate::sync::central::Central::open(&central.target()).map_err(fail)?;
    // A study the database does not hold, while it holds others, is a mistake (a default
    // study name, a typo), not an empty study: said, with the studies it holds.
    let held = if must_hold {
        db.studies().map_err(fail)?
    } else {
        Vec::new()
    };
    if !held.is_empty() && !held.contains(&study) {
        return Err((
            ExitKind::BadInput,
            format!(
                "study `{study}` is not in {}: it holds {} (name one with --study)",
                crate::sync::central::redacted(&central.target()),
                held.iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    Ok((db, study))
}

/// `empathic collect`.
#[allow(clippy::too_many_arguments)]
pub fn collect(
    central: &str,
    config: Option<&Path>,
    o: Overrides,
    client_id: &str,
    share_group: Option<&str>,
    study_key: &Path,
    signing_key: &Path,
    study_page: Option<PathBuf>,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    if let Some(page) = &study_page {
        crate::files::check_output(page)
            .map_err(|e| (ExitKind::BadInput, format!("--study-page: {e}")))?;
    }
    let sealed = o.security != Some(crate::config::SyncSecurity::Plain);
    let keys_err = |flag: &str, e: crate::sync::keys::KeyError| {
        (
            ExitKind::BadInput,
            format!("{flag}: {e} (sealed collection needs it; `empathic keys init` makes keys, or --security plain for a first try)"),
        )
    };
    // Sealed: both keys must be there. Plain: used when present.
    let gate = crate::sync::collect::Gate {
        accept_plain: !sealed,
        study_key: match crate::sync::keys::StudySecretKey::load(study_key) {
            Ok(k) => Some(k),
            Err(e) if sealed => return Err(keys_err("--study-key", e)),
            Err(_) => None,
        },
    };
    let signing = match crate::sync::keys::SigningKey::load(signing_key) {
        Ok(k) => Some(k),
        Err(e) if sealed => return Err(keys_err("--signing-key", e)),
        Err(_) => None,
    };
    if !sealed {
        eprintln!("collect: WARNING: {}", crate::sync::PLAIN_WARNING);
    }
    if let Some(g) = share_group.filter(|g| g.is_empty() || g.contains(['/', '+', '#'])) {
        return Err((
            ExitKind::BadInput,
            format!("share group `{g}` cannot be part of an MQTT topic (empty, or has / + #)"),
        ));
    }
    let broker = o.broker.clone().unwrap_or(config.sync.broker.clone());
    let (address, auth) = target(&config, &broker, &o)?;
    let study = o.study.unwrap_or(config.sync.study.clone());
    let stop = crate::exit::stop_flag().map_err(|e| {
        (
            ExitKind::Runtime,
            format!("cannot install signal handlers: {e}"),
        )
    })?;
    // The study page and the alerts are kept on their own thread: the collector only
    // counts what it stored, so acknowledgements never wait for a page.
    let changes = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let keeper =
        (study_page.is_some() || !config.collect.on_problem.trim().is_empty()).then(|| {
            crate::report::study::fresh::Keeper {
                central: central.to_string(),
                study: study.clone(),
                plan: config.study.clone(),
                collect: config.collect.clone(),
                page: study_page,
                changes: changes.clone(),
            }
        });
    let opts = crate::sync::collect::CollectOptions {
        host: address.host,
        port: address.port,
        auth,
        study,
        client_id: client_id.to_string(),
        share_group: share_group.map(str::to_string),
        changes: Some(changes),
        health_sweep: std::time::Duration::from_secs(u64::from(config.collect.health_sweep_s)),
    };
    let records = std::thread::scope(|scope| {
        if let Some(k) = &keeper {
            let stop = &stop;
            crate::named_thread::spawn_scoped(scope, "study-page", move || {
                crate::report::study::fresh::keep_fresh(k, stop)
            })
            .map_err(|e| {
                (
                    ExitKind::Runtime,
                    format!("cannot start the study-page thread: {e}"),
                )
            })?;
        }
        let records = crate::sync::collect::collect(central, &opts, &gate, signing.as_ref(), &stop);
        // The page thread ends with the collector (on SIGINT/SIGTERM or an error).
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        records.map_err(fail)
    })?;
    eprintln!(
        "collect: {records} record(s) stored in {}",
        crate::sync::central::redacted(central)
    );
    Ok(ExitCode::SUCCESS)
}

/// One station's health as a line of `collect stations`.
fn health_line(h: &crate::sync::central::StationHealth) -> String {
    // What a station sent never writes escapes to the terminal.
    crate::sync::health::printable(&health_line_raw(h), 2000)
}

fn health_line_raw(h: &crate::sync::central::StationHealth) -> String {
    let status = match (&h.status, &h.status_received_at) {
        (Some(s), Some(at)) => format!("{s} since {at}"),
        _ => "no status received".into(),
    };
    let Some(m) = &h.health else {
        return format!("{:<16} {status}; no health message received", h.station);
    };
    let device = |d: &serde_json::Value| {
        if d["present"] == true {
            "ok".to_string()
        } else {
            format!(
                "MISSING ({})",
                d["problem"].as_str().unwrap_or("no reason given")
            )
        }
    };
    format!(
        "{:<16} {status}; health sent {}: camera {}, microphone {}, disk {} MiB free, outbox {} pending, {} session(s) today, last {}",
        h.station,
        m["sent_at"].as_str().unwrap_or("?"),
        device(&m["camera"]),
        device(&m["microphone"]),
        m["disk_free_mib"].as_u64().map_or("?".to_string(), |f| f.to_string()),
        m["outbox_pending"].as_u64().unwrap_or(0),
        m["sessions_today"].as_u64().unwrap_or(0),
        m["last_session_status"].as_str().unwrap_or("none"),
    )
}

/// `collect quarantine list|drop`.
fn quarantine(action: QuarantineAction) -> Result<ExitCode, Failure> {
    match action {
        QuarantineAction::List {
            central,
            config,
            study,
            json,
        } => {
            let (mut db, study) = open_central(&central, config.path(), study, true)?;
            let list = db.quarantine_list(&study).map_err(fail)?;
            if json.json {
                print_json(&serde_json::json!({"study": study, "quarantined": list}))?;
                return Ok(ExitCode::SUCCESS);
            }
            if list.is_empty() {
                outln!("nothing quarantined for study {study}");
            }
            for q in &list {
                outln!(
                    "{}  {}  {} row(s), {} .. {}{}\n    {}",
                    q.id,
                    q.topic,
                    q.rows,
                    q.first_at,
                    q.last_at,
                    if q.read_whole {
                        " (read whole, answered)"
                    } else {
                        " (refused before reading; the station holds it)"
                    },
                    q.reason
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        QuarantineAction::Drop {
            id,
            central,
            config,
            study,
        } => {
            let (mut db, study) = open_central(&central, config.path(), study, true)?;
            let n = db.quarantine_drop(&study, &id).map_err(fail)?;
            if n == 0 {
                return Err((
                    ExitKind::BadInput,
                    format!("no quarantined message `{}` for study {study} (`collect quarantine list` shows their ids)", crate::sync::health::printable(&id, 80)),
                ));
            }
            outln!("dropped quarantined message {id}: {n} row(s) deleted");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `collect copy --from A --into B`.
fn copy(
    from: &str,
    into: &str,
    opts: &crate::sync::central::CopyOptions,
    json: bool,
) -> Result<ExitCode, Failure> {
    let study = opts.study.as_deref();
    use crate::sync::central::{is_postgres, redacted, Central};
    let same = if is_postgres(from) || is_postgres(into) {
        from == into
    } else {
        let canon = |p: &str| std::fs::canonicalize(p).ok();
        from == into || canon(from).is_some_and(|f| Some(f) == canon(into))
    };
    if same {
        return Err((
            ExitKind::BadInput,
            "--from and --into name the same central database".into(),
        ));
    }
    if !is_postgres(from) && !crate::store::central::is_central_file(Path::new(from)) {
        return Err((
            ExitKind::BadInput,
            format!("--from {from}: no central database there (a file `empathic collect` wrote, or postgres://...)"),
        ));
    }
    let mut source = Central::open(from).map_err(fail)?;
    if let Some(s) = study {
        let held = source.studies().map_err(fail)?;
        if !held.iter().any(|h| h == s) {
            return Err((
                ExitKind::BadInput,
                format!(
                    "study `{s}` is not in {}: it holds {}",
                    redacted(from),
                    held.iter()
                        .map(|h| format!("`{h}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    let mut target = Central::open(into).map_err(fail)?;
    let bar = super::progress_bar("records");
    let copied = target
        .copy_from(&mut source, opts, |done, all| {
            bar.set_length(all);
            bar.set_position(done);
        })
        .map_err(|e| {
            (
                ExitKind::Runtime,
                format!(
                    "copying {} into {}: {e} (what was copied stays; run it again to go on)",
                    redacted(from),
                    redacted(into)
                ),
            )
        })?;
    bar.finish_and_clear();
    if json {
        print_json(&copied)?;
    } else {
        outln!(
            "copied {} into {}: {} record(s) stored, {} already held, {} refused (see `collect quarantine list`); {} enrolment(s), {} withdrawal(s)",
            redacted(from),
            redacted(into),
            copied.records,
            copied.already_held,
            copied.refused,
            copied.enrolments,
            copied.withdrawals
        );
        if copied.unsigned_copied > 0 {
            outln!(
                "{} unsigned (plain sync) record(s) copied on the source's word (--accept-unsigned)",
                copied.unsigned_copied
            );
        }
        if copied.enrolments_not_copied > 0 {
            outln!(
                "{} enrolment(s) of the source not copied: the target trusts only the keys it enrols (--with-enrolments copies them)",
                copied.enrolments_not_copied
            );
        }
        if copied.withdrawals > 0 {
            outln!(
                "{} central withdrawal(s) of the source applied in the target (a withdrawal is always copied, so withdrawn data never comes back)",
                copied.withdrawals
            );
        }
        if copied.unverified > 0 {
            outln!(
                "{} record(s) NOT copied because they do not verify (nothing of them stored; copy again once fixed):",
                copied.unverified
            );
            for r in &copied.unverified_reasons {
                outln!("  {}", crate::sync::health::printable(r, 400));
            }
        }
    }
    // Records left behind are the run's failure to say, in scripts too.
    if copied.unverified > 0 {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
