//! `empathic-dialogue`: the reference dialogue app. It is the robot's side of one whole
//! EmpathicStories++ session, spoken to `empathic run` over the control socket and nothing
//! else: it subscribes to what the station perceives, starts the session, waits for the
//! participant to be in view, greets them and waits for them to stop speaking before each
//! of its turns, asks the station for stories chosen for this person after they shared
//! their own, shows them and sends the ratings, reflects on the story the station predicted
//! moved them most, and ends the session. A participant who shares nothing (silent, or a
//! station without a microphone) is thanked and the session closed without stories.
//!
//! Contract: exit 0 when the session ran to its end (`session`/`ended`), 1 when the station
//! refused a request or went away (the reason on stderr; a session it started is stopped),
//! 2 for wrong arguments. What the robot says goes to stdout, one line per turn; with
//! `--summary FILE`, what it heard and what it did is written there as JSON.
//!
//! Why Rust and no crate beyond `serde_json` (and `signal-hook`, to stop its session on
//! SIGINT and SIGTERM): the tests and CI run it against the live
//! service with nothing beyond the crate's own build (no Python in `make test`), and an
//! integrator reads one file that uses the protocol only (docs/station.md), none of the
//! runtime's code. A robot's speech synthesis is out of scope: a turn is printed and "takes"
//! the time it would take to say (2.5 words a second), then it is sent as the robot's
//! utterance so the station can tell the robot's voice from the participant's.

mod ears;
mod station;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use ears::{subscribe, Ears, Perceived};
use station::Station;

const USAGE: &str = "usage: empathic-dialogue --socket PATH --participant ID [--ratings 4,2,5] \
[--policy similarity|predicted_empathy|explore] [--answer-s 10] [--end-of-turn-ms 800] \
[--max-turn-s 60] [--read-s 20] [--face-s 30] [--prediction-wait-s 20] [--words-wait-s 30] \
[--summary FILE]";

/// `--help`: every option, what it does and its default.
const HELP: &str = "Drives one session on an empathic station through its control socket, as a robot's dialogue app would.

  --socket PATH             the station's control socket ([live] socket)          required
  --participant ID          the participant's pseudonym (with consent recorded)   required
  --ratings 4,2,5           the participant's 1-5 rating of each story shown      default: asked on stdin
  --policy P                which stories `recommend` picks: similarity, predicted_empathy or explore
                                                                                  default: similarity
  --answer-s S              wait for an answer to start after a prompt            default: 10
  --end-of-turn-ms MS       silence after voice/stopped before the robot speaks   default: 800
  --max-turn-s S            longest answer waited out                             default: 60
  --read-s S                reading time per story                                default: 20
  --face-s S                wait for the participant's face (start, and when lost) default: 30
  --prediction-wait-s S     wait at the reflection for a prediction per story     default: 20
  --words-wait-s S          wait after the share for its words to be stored       default: 30
  --summary FILE            write what happened (JSON: messages, turns, choices, latency)
                                                                                  default: none
The session is bound to this app's connection: if the app dies, the station ends it after
its grace ([live] app_grace_ms). SIGINT or SIGTERM stops the session, then exits 1.
Exit: 0 done; 1 the station refused or went away, or a signal (a session it started is stopped); 2 arguments.";

/// The robot's settings (every time a limit, so a session never hangs on a silent or
/// absent participant).
struct Args {
    socket: PathBuf,
    participant: String,
    /// The participant's ratings, 1-5, one per story; without them, asked on stdin (the
    /// tablet's part in a real station).
    ratings: Option<Vec<u8>>,
    policy: String,
    /// How long to wait for an answer to start after the robot's prompt.
    answer: Duration,
    /// Silence after `voice`/`stopped` before the robot takes its turn.
    end_of_turn: Duration,
    /// The longest answer the robot waits out before it speaks anyway.
    max_turn: Duration,
    /// Reading time per story.
    read: Duration,
    /// How long to wait for the participant's face (at the start, and when lost).
    face: Duration,
    /// How long, at the reflection, to wait for a prediction toward each shown story.
    prediction_wait: Duration,
    /// How long, after the participant's share, to wait for their words to be stored.
    words_wait: Duration,
    summary: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        socket: PathBuf::new(),
        participant: String::new(),
        ratings: None,
        policy: "similarity".into(),
        answer: Duration::from_secs(10),
        end_of_turn: Duration::from_millis(800),
        max_turn: Duration::from_secs(60),
        read: Duration::from_secs(20),
        face: Duration::from_secs(30),
        prediction_wait: Duration::from_secs(20),
        words_wait: Duration::from_secs(30),
        summary: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let secs = |v: String| -> Result<Duration, String> {
            v.parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64)
                .ok_or(format!("{flag}: `{v}` is not a number of seconds"))
        };
        match flag.as_str() {
            "--socket" => a.socket = PathBuf::from(value()?),
            "--participant" => a.participant = value()?,
            "--ratings" => {
                let v = value()?;
                let r: Result<Vec<u8>, _> = v.split(',').map(|x| x.trim().parse::<u8>()).collect();
                match r {
                    Ok(r) if r.iter().all(|x| (1..=5).contains(x)) => a.ratings = Some(r),
                    _ => return Err(format!("--ratings: `{v}` is not a list of 1-5")),
                }
            }
            "--policy" => a.policy = value()?,
            "--answer-s" => a.answer = secs(value()?)?,
            "--end-of-turn-ms" => a.end_of_turn = secs(value()?)? / 1000,
            "--max-turn-s" => a.max_turn = secs(value()?)?,
            "--read-s" => a.read = secs(value()?)?,
            "--face-s" => a.face = secs(value()?)?,
            "--prediction-wait-s" => a.prediction_wait = secs(value()?)?,
            "--words-wait-s" => a.words_wait = secs(value()?)?,
            "--summary" => a.summary = Some(PathBuf::from(value()?)),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if a.socket.as_os_str().is_empty() || a.participant.is_empty() {
        return Err("--socket and --participant are required".into());
    }
    Ok(a)
}

/// How one of the participant's turns went.
struct Turn {
    spoke: bool,
    /// Ended by the participant's silence (not by the robot's limit).
    by_silence: bool,
    waited: Duration,
}

/// Waits for the participant's answer after a prompt: for them to start (up to
/// `args.answer`), then for `args.end_of_turn` of silence after they stop (up to
/// `args.max_turn`), so the robot never talks over them.
fn wait_turn(ears: &Ears, args: &Args) -> Turn {
    let t0 = Instant::now();
    let starts = ears.lock().starts;
    let spoke = ears.wait_for(args.answer, |h| h.speaking || h.starts > starts);
    if !spoke {
        return Turn {
            spoke,
            by_silence: false,
            waited: t0.elapsed(),
        };
    }
    let by_silence = ears.wait_for(args.max_turn, |h| {
        !h.speaking && h.voice_at.is_some_and(|t| t.elapsed() >= args.end_of_turn)
    });
    Turn {
        spoke,
        by_silence,
        waited: t0.elapsed(),
    }
}

/// Waits for the face to be in view; says so when it has to wait.
fn wait_face(ears: &Ears, station: &Station, args: &Args) -> Result<bool, String> {
    if ears.lock().face == Some(true) {
        return Ok(true);
    }
    if ears.lock().face == Some(false) {
        station.say("I'll wait until you're back.")?;
    }
    Ok(ears.wait_for(args.face, |h| h.face == Some(true)))
}

fn rating_for(args: &Args, n: usize, title: &str) -> Result<u8, String> {
    if let Some(r) = &args.ratings {
        return r
            .get(n)
            .copied()
            .ok_or(format!("--ratings gives no rating for story {}", n + 1));
    }
    loop {
        print!("tablet: how much empathy did you feel toward \"{title}\"? (1-5) ");
        std::io::stdout().flush().map_err(|e| e.to_string())?;
        let mut line = String::new();
        if std::io::stdin()
            .read_line(&mut line)
            .map_err(|e| e.to_string())?
            == 0
        {
            return Err("no rating: standard input ended".into());
        }
        match line.trim().parse::<u8>() {
            Ok(v) if (1..=5).contains(&v) => return Ok(v),
            _ => println!("tablet: please answer 1, 2, 3, 4 or 5"),
        }
    }
}

fn turn_json(name: &str, t: &Turn) -> Value {
    json!({"turn": name, "spoke": t.spoke, "ended_by_silence": t.by_silence,
           "waited_ms": t.waited.as_millis() as u64})
}

/// The session, from start to `ended`.
fn session(args: &Args, station: &Station, ears: &Ears, summary: &mut Value) -> Result<(), String> {
    let mut turns = Vec::new();
    let face_at_start = wait_face(ears, station, args)?;
    summary["face_at_start"] = json!(face_at_start);

    station.phase("warm_up")?;
    station.say("Hello, it's good to see you. How has your day been?")?;
    turns.push(turn_json("warm_up", &wait_turn(ears, args)));

    station.phase("story_share")?;
    station.say(
        "Could you tell me about a time you felt alone, or someone surprised you with kindness?",
    )?;
    let shared_before = ears.lock().participant_utterances;
    let share_turn = wait_turn(ears, args);
    turns.push(turn_json("story_share", &share_turn));
    // `recommend` rests on the participant's words: when they spoke, wait until the
    // station's recogniser (or the app's transcripts) has stored at least one utterance of
    // the share; recognition ends some time after the voice does.
    if share_turn.spoke {
        let heard = ears.wait_for(args.words_wait, |h| {
            h.participant_utterances > shared_before
        });
        summary["share_words_waited"] = json!(heard);
    }
    // Nothing shared (silent, or no microphone): there is nothing to choose stories for.
    // The robot says so kindly and closes the session; it is still a whole session.
    if !share_turn.spoke && ears.lock().participant_utterances == shared_before {
        summary["story_shared"] = json!(false);
        station.say("That's all right. We can share stories another time.")?;
        return cool_down(station, ears, summary, turns, "spending time with me");
    }
    summary["story_shared"] = json!(true);

    // Stories chosen on the station for this person, from what they just shared.
    let predictions_before = ears.lock().counts.get("prediction").copied().unwrap_or(0);
    let answer = station.ask(json!({"type": "recommend", "k": 3, "policy": args.policy}))?;
    summary["recommended_from"] = answer["from"].clone();
    summary["recommend_predicted_from"] = answer["predicted_from"].clone();
    summary["predictions_before_recommend"] = json!(predictions_before);
    let stories = answer["stories"].as_array().cloned().unwrap_or_default();
    if stories.is_empty() {
        return Err("recommend found no story this participant has not seen".into());
    }
    summary["recommended"] = json!(stories
        .iter()
        .map(|s| s["story_id"].clone())
        .collect::<Vec<_>>());
    station.phase("story_receive")?;
    station.say("Thank you for sharing that. I found some stories I'd like you to read.")?;
    let mut ratings = Vec::new();
    for (n, s) in stories.iter().enumerate() {
        let (id, title) = (
            s["story_id"].as_str().unwrap_or(""),
            s["title"].as_str().unwrap_or(""),
        );
        // Acting on `face`: a participant who walked away is waited for, not read to.
        if !wait_face(ears, station, args)? {
            summary["face_lost_during_stories"] = json!(true);
        }
        station.ask(
            json!({"type": "story_shown", "story_id": id, "title": title,
                           "text": s["text"].as_str().unwrap_or(title)}),
        )?;
        println!("tablet: shows \"{title}\"");
        std::thread::sleep(args.read);
        let value = rating_for(args, n, title)?;
        station.ask(json!({"type": "rating", "story_id": id, "value": value}))?;
        ratings.push(json!({"story_id": id, "value": value}));
    }
    summary["ratings"] = json!(ratings);

    // Acting on `prediction`: the reflection is about the story the station predicted
    // moved them most (mean calibrated score since it was shown); the highest rating only
    // when no prediction came in time.
    station.phase("reflection")?;
    let ids: Vec<String> = stories
        .iter()
        .filter_map(|s| s["story_id"].as_str().map(str::to_string))
        .collect();
    ears.wait_for(args.prediction_wait, |h| {
        ids.iter().all(|id| h.scores.contains_key(id))
    });
    let (chosen, basis) = {
        let heard = ears.lock();
        let mean = |id: &String| {
            heard
                .scores
                .get(id)
                .map(|v| v.iter().sum::<f64>() / v.len() as f64)
        };
        let best = ids
            .iter()
            .filter_map(|id| mean(id).map(|m| (id.clone(), m)))
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        match best {
            Some((id, m)) => (
                id,
                json!({"by": "prediction", "predictor": heard.predictor, "mean_score": m}),
            ),
            None => {
                let top = ratings
                    .iter()
                    .max_by_key(|r| r["value"].as_u64())
                    .and_then(|r| r["story_id"].as_str())
                    .unwrap_or_default()
                    .to_string();
                (top, json!({"by": "rating"}))
            }
        }
    };
    let title = stories
        .iter()
        .find(|s| s["story_id"].as_str() == Some(chosen.as_str()))
        .and_then(|s| s["title"].as_str())
        .unwrap_or("that story");
    station.say(&format!(
        "I think \"{title}\" stayed with you. What about it felt close to your own experience?"
    ))?;
    turns.push(turn_json("reflection", &wait_turn(ears, args)));
    summary["reflection"] = json!({"story_id": chosen, "basis": basis});

    cool_down(station, ears, summary, turns, "reading with me")
}

/// The cool-down: thanks, the session stopped, and its end heard from the station.
fn cool_down(
    station: &Station,
    ears: &Ears,
    summary: &mut Value,
    turns: Vec<Value>,
    for_what: &str,
) -> Result<(), String> {
    station.phase("cool_down")?;
    station.say(&format!(
        "Thank you for {for_what} today. I'll see you next time."
    ))?;
    station.stop()?;
    summary["turns"] = json!(turns);
    if !ears.wait_for(Duration::from_secs(120), |h| h.ended.is_some()) {
        return Err("the station did not say the session ended within 120 s".into());
    }
    Ok(())
}

fn run(args: &Args) -> Result<Value, (String, Value)> {
    let station = Arc::new(Station::new(args.socket.clone()));
    let ears = subscribe(args).map_err(|e| (e, Value::Null))?;
    stop_on_signals(station.clone()).map_err(|e| (e, Value::Null))?;
    let start = station
        .start(&args.participant)
        .map_err(|e| (e, Value::Null))?;
    {
        let station = station.clone();
        std::thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_secs(1));
                station.keep_alive();
            })
            .map_err(|e| (format!("cannot start the heartbeat: {e}"), Value::Null))?;
    }
    let mut summary = json!({"session_id": start["session_id"], "kept_by": start["kept_by"]});
    let result = session(args, &station, &ears, &mut summary);
    if let Err(e) = &result {
        // A session this app started is never left running; cut short, it says why.
        let _ = station.stop_early(&format!("the app stopped on an error: {e}"));
    }
    {
        let heard = ears.lock();
        summary["messages"] = json!(heard.counts);
        summary["dropped"] = json!(heard.dropped);
        summary["latency_ms"] = latency(&heard);
        summary["ended"] = heard.ended.clone().unwrap_or(Value::Null);
    }
    match result {
        Ok(()) => Ok(summary),
        Err(e) => Err((e, summary)),
    }
}

/// On SIGINT or SIGTERM the app stops the session it started, saying it was cut short (the
/// station stores it `incomplete` with the signal as the reason), and exits 1; a session
/// never outlives the app that ran it.
fn stop_on_signals(station: Arc<Station>) -> Result<(), String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| format!("cannot watch signals: {e}"))?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                match station.session_id() {
                    Some(id) => match station.stop_early(&format!("the app got {name}")) {
                        Ok(_) => eprintln!("empathic-dialogue: {name}: session {id} stopped"),
                        Err(e) => {
                            eprintln!("empathic-dialogue: {name}: could not stop session {id}: {e}")
                        }
                    },
                    None => eprintln!("empathic-dialogue: {name}: no session started"),
                }
                std::process::exit(1);
            }
        })
        .map(drop)
        .map_err(|e| format!("cannot start the signal thread: {e}"))
}

/// p50 and p95 (nearest rank) of `v`.
fn percentiles(mut v: Vec<u64>) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_unstable();
    let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    json!({"p50": rank(0.50), "p95": rank(0.95), "max": v[v.len() - 1]})
}

/// The latencies this subscriber saw, by share (see [`Perceived::voice_latency`]).
fn latency(heard: &Perceived) -> Value {
    let share = |k: usize| percentiles(heard.voice_latency.iter().map(|l| l[k]).collect());
    json!({
        "voice": {"n": heard.voice_latency.len(), "total": share(0), "rule": share(1),
                  "to_runtime": share(2), "runtime": share(3)},
        "prediction": {"n": heard.prediction_latency.len(),
                       "total": percentiles(heard.prediction_latency.clone())},
    })
}

fn write_summary(args: &Args, summary: &Value) {
    if let Some(path) = &args.summary {
        let text = serde_json::to_string_pretty(summary).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("empathic-dialogue: cannot write {}: {e}", path.display());
        }
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        // Asked for help: the usage on stdout, success.
        Err(e) if e.is_empty() => {
            println!("{USAGE}\n\n{HELP}");
            return;
        }
        Err(e) => {
            eprintln!("empathic-dialogue: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    match run(&args) {
        Ok(summary) => {
            write_summary(&args, &summary);
            println!(
                "session {} ended: {}",
                summary["session_id"].as_str().unwrap_or("?"),
                summary["ended"]["status"].as_str().unwrap_or("?")
            );
        }
        Err((e, summary)) => {
            write_summary(&args, &summary);
            eprintln!("empathic-dialogue: {e}");
            std::process::exit(1);
        }
    }
}
