//! Schema migrations of the session store.
//!
//! Contract: migrations are numbered from 1 and applied in order, each in its own
//! transaction together with its row in `schema_migrations`; a database newer than this
//! build (a higher version than [`MIGRATIONS`] knows) is refused rather than written to.
//! Never edit a migration that has shipped: add the next one.

/// (version, name, SQL) of every migration, in order.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "session store", V1),
    (2, "text modality and story embeddings", V2),
    (3, "modality producers and fusion predictions", V3),
    (4, "sync outbox", V4),
    (5, "sync settings", V5),
    (6, "per-collector receipts", V6),
    (7, "what a central database's session records carried", V7),
    (
        8,
        "what a story exposure showed, when it differs from the bank",
        V8,
    ),
    (9, "sealed sync: each message's payload as sealed", V9),
    (10, "who transcribed each utterance", V10),
    (
        11,
        "consent messages; what a collector refused, and why",
        V11,
    ),
    (12, "what moved each prediction", V12),
    (
        13,
        "what a collector read when it refused a message as too new",
        V13,
    ),
];

/// Version 13: what the refusing collector read when it refused a message (`refused_reads`,
/// `sync::Refusal::reads`, for example `records v2, consent v1`). A message refused as
/// `too_new` is sent again when that collector says (its retained hello) it now reads
/// something else: an upgrade, not a restart, lifts the hold.
const V13: &str = r#"
ALTER TABLE outbox ADD COLUMN refused_reads TEXT;
"#;

/// Version 12: each prediction's attribution to the cues of its window
/// (`core::Attribution`: the baseline, how it was computed, and per cue its value as JSON),
/// removed with its prediction. Synced under `[sync] window_features` (what moved a score is
/// read from the window's features).
const V12: &str = r#"
CREATE TABLE attributions (
    session_id   TEXT NOT NULL,
    window_index INTEGER NOT NULL,
    predictor    TEXT NOT NULL,
    story_id     TEXT NOT NULL,
    baseline     REAL NOT NULL,
    method       TEXT NOT NULL,
    coalitions   INTEGER NOT NULL,
    cues         TEXT NOT NULL,
    PRIMARY KEY (session_id, window_index, predictor, story_id),
    FOREIGN KEY (session_id, window_index, predictor, story_id)
        REFERENCES predictions(session_id, window_index, predictor, story_id) ON DELETE CASCADE
) WITHOUT ROWID;
"#;

/// Version 11: a participant's consent as its own outbox message (`kind` `consent`, the
/// participant its subject), so a change reaches the study's central database without
/// waiting for a session; and a collector's signed refusal of a message (`sync::Refusal`):
/// who refused it (`refused_by`), when, the reason's code and text. A refusal that a change
/// of configuration can cure (the station not enrolled, revoked, a key the collector cannot
/// use) holds the message while the station's sync configuration is the one it was refused
/// under (`refused_config`, a digest of it): it is not sent again until that changes, but
/// for one probe an hour. A final refusal (the collector read the message and keeps it in
/// quarantine) leaves `refused_config` NULL: its receipt settles it, and the reason stays
/// for `sync status`. SQLite cannot widen a CHECK in place: the table is rebuilt, rows,
/// numbering (`sqlite_sequence`) and index kept.
const V11: &str = r#"
CREATE TABLE outbox_v11 (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL UNIQUE,
    kind       TEXT NOT NULL CHECK (kind IN ('session', 'tombstone', 'purge', 'consent')),
    subject    TEXT NOT NULL,
    payload    TEXT NOT NULL,
    sha256     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    state      TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'synced')),
    sent_at    TEXT,
    attempts   INTEGER NOT NULL DEFAULT 0,
    synced_at  TEXT,
    last_error TEXT,
    sealed_to  TEXT,
    sealed     TEXT,
    refused_at     TEXT,
    refused_by     TEXT,
    refused_code   TEXT,
    refused_reason TEXT,
    refused_config TEXT
);
INSERT INTO outbox_v11 (seq, message_id, kind, subject, payload, sha256, created_at, state,
                        sent_at, attempts, synced_at, last_error, sealed_to, sealed)
    SELECT seq, message_id, kind, subject, payload, sha256, created_at, state,
           sent_at, attempts, synced_at, last_error, sealed_to, sealed
    FROM outbox ORDER BY seq;
UPDATE sqlite_sequence
   SET seq = max(seq, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'outbox'), 0))
 WHERE name = 'outbox_v11';
DROP TABLE outbox;
ALTER TABLE outbox_v11 RENAME TO outbox;
CREATE INDEX outbox_pending ON outbox (state, seq);
"#;

/// Version 10: who transcribed an utterance (`source`: `dialogue_app`, the default and every
/// utterance before this version, or `asr`, the station's own recogniser), the recogniser's
/// model id and its confidence (mean token log-probability); both NULL for the dialogue app.
/// A session's `text_source` says whose utterances fed its text modality (NULL before this
/// version: the dialogue app's).
const V10: &str = r#"
ALTER TABLE sessions ADD COLUMN text_source TEXT;
ALTER TABLE utterances ADD COLUMN source TEXT NOT NULL DEFAULT 'dialogue_app';
ALTER TABLE utterances ADD COLUMN model TEXT;
ALTER TABLE utterances ADD COLUMN confidence REAL;
"#;

/// Version 9: with `[sync] security = "sealed"`, a message's payload sealed to the study's
/// key (`sealed`, base64) and that key (`sealed_to`), kept from the first send so every
/// resend carries the same bytes: a sealed box is random, and a collector holding chunks of
/// an interrupted send must be able to complete them with the next. Sealed anew when the
/// study's key changed. NULL for plain sync and before the first send.
const V9: &str = r#"
ALTER TABLE outbox ADD COLUMN sealed_to TEXT;
ALTER TABLE outbox ADD COLUMN sealed TEXT;
"#;

/// Version 8: a `story_shown` event whose title or text differs from the stored story of
/// that id (an edited bank, a dialogue app that shortened the story) keeps what the
/// participant actually saw on the exposure. Both columns are NULL when the event showed
/// the stored story exactly, which is every exposure before this version.
const V8: &str = r#"
ALTER TABLE story_exposures ADD COLUMN shown_title TEXT;
ALTER TABLE story_exposures ADD COLUMN shown_text TEXT;
"#;

/// Version 7: in a central database (the collector's, or the snapshot of a PostgreSQL one),
/// which optional tables each session's applied record carried (`config::SyncContent`
/// as JSON), so readers say "not synced to this database" instead of showing nothing as
/// zero. A station's own database leaves it empty: it holds everything it stored.
const V7: &str = r#"
CREATE TABLE session_sync (
    session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
    content    TEXT NOT NULL
) WITHOUT ROWID;
"#;

/// Version 6: which collectors (a client id, or the share group of collectors that split
/// the load) confirmed each outbox message. A station configured with `[sync] collectors`
/// calls a message synced only when every one of them did, so two independent central
/// databases (say a SQLite file and a PostgreSQL) each get everything even when a broker
/// that lost its state dropped the message for one of them.
const V6: &str = r#"
CREATE TABLE outbox_receipts (
    message_id  TEXT NOT NULL,
    collector   TEXT NOT NULL,
    received_at TEXT NOT NULL,
    PRIMARY KEY (message_id, collector)
) WITHOUT ROWID;
"#;

/// Version 5: what a station's session records carry (`[sync]` switches, see
/// `config::SyncContent`), as the config last said.
const V5: &str = r#"
CREATE TABLE sync_settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
"#;

/// Version 4: the outbox of study sync (`src/sync/`) and the audit of participant purges. A message is written in the same
/// transaction as what it announces: a session's record when the session ends (complete,
/// incomplete or failed), a tombstone when a stored session is replaced or removed. The
/// announced session is `subject` (not `session_id`: outbox rows must outlive the session
/// rows they announce, and replace/delete sweep every `session_id` column).
const V4: &str = r#"
CREATE TABLE outbox (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL UNIQUE,
    kind       TEXT NOT NULL CHECK (kind IN ('session', 'tombstone', 'purge')),
    subject    TEXT NOT NULL,
    payload    TEXT NOT NULL,
    sha256     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    -- pending: not yet acknowledged by the broker; sent: the broker has it (PUBACK), no
    -- collector receipt yet; synced: a collector committed it and said so (receipt).
    state      TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'synced')),
    sent_at    TEXT,
    attempts   INTEGER NOT NULL DEFAULT 0,
    synced_at  TEXT,
    last_error TEXT
);
CREATE INDEX outbox_pending ON outbox (state, seq);

-- A participant's withdrawal: that it happened, when, and how many sessions went; nothing
-- of their data.
CREATE TABLE purges (
    participant_id TEXT NOT NULL,
    sessions       INTEGER NOT NULL,
    purged_at      TEXT NOT NULL
);
"#;

/// Version 3: each session's modalities record what produced them (a stage with its layout
/// version, or a model id with its sha256); predictions carry what an analyst needs (the
/// predictor, whether the story was shown or retrieved while the participant shared, raw
/// cosine, calibrated 1-5 score and which calibration, the modality subset
/// and its coverage of the window, whether the predictor is synthetic). Predictions refer
/// to their session, not to the window row: the fusion stage and the window store are
/// separate consumers of the same window, so either may reach the writer first.
const V3: &str = r#"
ALTER TABLE modalities ADD COLUMN producer TEXT;
ALTER TABLE modalities ADD COLUMN layout_version INTEGER;

CREATE TABLE predictions_v3 (
    session_id   TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    window_index INTEGER NOT NULL,
    predictor    TEXT NOT NULL,
    story_id     TEXT NOT NULL,
    in_play      TEXT NOT NULL CHECK (in_play IN ('shown', 'retrieved')),
    raw_cosine   REAL,
    score        REAL NOT NULL,
    calibration  TEXT NOT NULL,
    modalities   TEXT NOT NULL,
    coverage     TEXT NOT NULL,
    synthetic    INTEGER NOT NULL CHECK (synthetic IN (0, 1)),
    created_at   TEXT NOT NULL,
    PRIMARY KEY (session_id, window_index, predictor, story_id)
) WITHOUT ROWID;
INSERT INTO predictions_v3 (session_id, window_index, predictor, story_id, in_play, raw_cosine,
    score, calibration, modalities, coverage, synthetic, created_at)
    SELECT session_id, window_index, model, story_id, 'shown', NULL, value, 'unknown', '[]', '{}',
        0, created_at FROM predictions;
DROP TABLE predictions;
ALTER TABLE predictions_v3 RENAME TO predictions;
"#;

/// Version 2: modalities may be `text`; stories carry one embedding per sentence encoder.
const V2: &str = r#"
CREATE TABLE modalities_v2 (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    stream     TEXT NOT NULL CHECK (stream IN ('video', 'text', 'audio')),
    dims       INTEGER NOT NULL,
    columns    TEXT NOT NULL,
    PRIMARY KEY (session_id, name)
) WITHOUT ROWID;
INSERT INTO modalities_v2 SELECT session_id, name, stream, dims, columns FROM modalities;
DROP TABLE modalities;
ALTER TABLE modalities_v2 RENAME TO modalities;

-- One embedding per story and sentence-encoder model (little-endian f32 x dims).
CREATE TABLE story_embeddings (
    story_id TEXT NOT NULL REFERENCES stories(id) ON DELETE CASCADE,
    model    TEXT NOT NULL,
    dims     INTEGER NOT NULL,
    vec      BLOB NOT NULL,
    PRIMARY KEY (story_id, model)
) WITHOUT ROWID;
"#;

const V1: &str = r#"
CREATE TABLE stations (
    id            TEXT PRIMARY KEY,
    first_seen_at TEXT NOT NULL
);

-- Pseudonymous participants; consent is recorded by study staff.
CREATE TABLE participants (
    id                TEXT PRIMARY KEY,
    consent           TEXT NOT NULL DEFAULT 'unknown'
                      CHECK (consent IN ('unknown', 'given', 'withdrawn')),
    consent_at        TEXT,
    -- Raw video/audio may leave the station only when this is 1.
    raw_media_consent INTEGER NOT NULL DEFAULT 0 CHECK (raw_media_consent IN (0, 1)),
    first_seen_at     TEXT NOT NULL
);

CREATE TABLE sessions (
    id             TEXT PRIMARY KEY,
    station_id     TEXT NOT NULL REFERENCES stations(id),
    participant_id TEXT REFERENCES participants(id),
    source         TEXT NOT NULL CHECK (source IN ('replay', 'live')),
    source_path    TEXT,
    format_version INTEGER,
    start_time     TEXT,
    nominal_fps    REAL NOT NULL,
    status         TEXT NOT NULL
                   CHECK (status IN ('running', 'complete', 'failed', 'incomplete')),
    status_reason  TEXT,
    -- Who is writing a running session, to tell a live writer from a dead one.
    owner_host     TEXT,
    owner_pid      INTEGER,
    owner_boot_id  TEXT,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    frames         INTEGER NOT NULL DEFAULT 0,
    windows        INTEGER NOT NULL DEFAULT 0,
    duration_ns    INTEGER NOT NULL DEFAULT 0,
    quality_json   TEXT
);
CREATE INDEX sessions_by_participant ON sessions(participant_id);

CREATE TABLE phases (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    phase      TEXT NOT NULL CHECK (phase IN
               ('warm_up', 'story_share', 'story_receive', 'reflection', 'cool_down')),
    start_ns   INTEGER NOT NULL,
    end_ns     INTEGER,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

-- Every event line as read, in time order, with its JSON payload.
CREATE TABLE events (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    t_ns       INTEGER NOT NULL,
    type       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

CREATE TABLE utterances (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    speaker    TEXT NOT NULL,
    start_ns   INTEGER NOT NULL,
    end_ns     INTEGER NOT NULL,
    text       TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

CREATE TABLE stories (
    id         TEXT PRIMARY KEY,
    title      TEXT NOT NULL,
    text       TEXT NOT NULL,
    source     TEXT,
    licence    TEXT,
    created_at TEXT NOT NULL
);

CREATE TABLE story_exposures (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    story_id   TEXT NOT NULL REFERENCES stories(id),
    position   INTEGER NOT NULL,
    shown_ns   INTEGER NOT NULL,
    PRIMARY KEY (session_id, story_id)
) WITHOUT ROWID;

CREATE TABLE self_ratings (
    session_id TEXT NOT NULL,
    story_id   TEXT NOT NULL,
    value      INTEGER NOT NULL CHECK (value BETWEEN 1 AND 5),
    t_ns       INTEGER NOT NULL,
    PRIMARY KEY (session_id, story_id),
    FOREIGN KEY (session_id, story_id)
        REFERENCES story_exposures(session_id, story_id) ON DELETE CASCADE
) WITHOUT ROWID;

-- Big Five, MPQ absorption, trait empathy, compassionate love, UBC state social connection...
CREATE TABLE survey_responses (
    participant_id TEXT NOT NULL REFERENCES participants(id),
    instrument     TEXT NOT NULL,
    item           TEXT NOT NULL,
    time_point     TEXT NOT NULL CHECK (time_point IN ('pre_study', 'mid_study', 'post_study')),
    value          REAL NOT NULL,
    session_id     TEXT REFERENCES sessions(id) ON DELETE SET NULL,
    t_ns           INTEGER,
    PRIMARY KEY (participant_id, instrument, item, time_point)
) WITHOUT ROWID;

-- The feature modalities a session carries and their column names (JSON array).
CREATE TABLE modalities (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    stream     TEXT NOT NULL CHECK (stream IN ('video', 'audio')),
    dims       INTEGER NOT NULL,
    columns    TEXT NOT NULL,
    PRIMARY KEY (session_id, name)
) WITHOUT ROWID;

-- One row per frame slot of the nominal grid; decoded = 0 for a dropped frame.
CREATE TABLE frames (
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    frame_index INTEGER NOT NULL,
    t_ns        INTEGER NOT NULL,
    decoded     INTEGER NOT NULL CHECK (decoded IN (0, 1)),
    PRIMARY KEY (session_id, frame_index)
) WITHOUT ROWID;

-- Per-frame feature vectors, stored once per frame (windows refer to frame ranges).
-- vec: little-endian f32 x dims; NULL when the modality is absent on that frame.
CREATE TABLE frame_features (
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    modality    TEXT NOT NULL,
    frame_index INTEGER NOT NULL,
    present     INTEGER NOT NULL CHECK (present IN (0, 1)),
    vec         BLOB,
    PRIMARY KEY (session_id, modality, frame_index)
) WITHOUT ROWID;

CREATE TABLE windows (
    session_id       TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    window_index     INTEGER NOT NULL,
    start_frame      INTEGER NOT NULL,
    end_frame        INTEGER NOT NULL,
    start_ns         INTEGER NOT NULL,
    end_ns           INTEGER NOT NULL,
    phase            TEXT,
    video_presence   REAL NOT NULL,
    audio_presence   REAL NOT NULL,
    brightness       REAL,
    sharpness        REAL,
    level_dbfs       REAL,
    voice_activity   REAL,
    clipped_fraction REAL,
    PRIMARY KEY (session_id, window_index)
) WITHOUT ROWID;

-- Per window and modality: the presence mask (one byte 0/1 per frame) and the mean vector
-- over present frames (little-endian f32, NULL when never present).
CREATE TABLE window_features (
    session_id     TEXT NOT NULL,
    window_index   INTEGER NOT NULL,
    modality       TEXT NOT NULL,
    present_frames INTEGER NOT NULL,
    presence       BLOB NOT NULL,
    mean           BLOB,
    PRIMARY KEY (session_id, window_index, modality),
    FOREIGN KEY (session_id, window_index)
        REFERENCES windows(session_id, window_index) ON DELETE CASCADE
) WITHOUT ROWID;

-- Fusion-model outputs: predicted empathy of the window toward a story.
CREATE TABLE predictions (
    session_id   TEXT NOT NULL,
    window_index INTEGER NOT NULL,
    model        TEXT NOT NULL,
    story_id     TEXT NOT NULL,
    value        REAL NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (session_id, window_index, model, story_id),
    FOREIGN KEY (session_id, window_index)
        REFERENCES windows(session_id, window_index) ON DELETE CASCADE
) WITHOUT ROWID;
"#;
