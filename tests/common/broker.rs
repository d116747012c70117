//! A real Mosquitto (Debian's `mosquitto`, installed by set-up) on a free loopback port,
//! and the study's collector (`empathic collect`), for the sync tests.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::path_str;

pub struct Broker {
    pub child: Child,
    pub port: u16,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn start_broker(dir: &Path, port: u16) -> Broker {
    let conf = dir.join(format!("mosquitto-{port}.conf"));
    std::fs::write(
        &conf,
        format!(
            "listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {}/\n",
            dir.display()
        ),
    )
    .unwrap();
    run_broker(&conf, port)
}

/// Runs `mosquitto -c conf` and waits until it listens on `port`.
pub fn run_broker(conf: &Path, port: u16) -> Broker {
    let child = Command::new("mosquitto")
        .arg("-c")
        .arg(conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mosquitto is installed by scripts/setup.sh (Debian package `mosquitto`)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "mosquitto did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Broker { child, port }
}

/// A running collector, killed when dropped: a test that fails half-way leaves no
/// collector behind to hold its broker's port or its central database.
pub struct Collector(Child);

impl std::ops::Deref for Collector {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Collector {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl From<Child> for Collector {
    fn from(child: Child) -> Self {
        Collector(child)
    }
}

/// `empathic collect` into `central`, study `test-study`.
pub fn start_collector(central: &Path, port: u16) -> Collector {
    start_collector_as(path_str(central), port, "test-collector")
}

/// `empathic collect --central TARGET` (a file or a `postgres://` URL) as `client_id`.
pub fn start_collector_as(target: &str, port: u16, client_id: &str) -> Collector {
    Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args([
            "collect",
            "--security",
            "plain",
            "--central",
            target,
            "--broker",
            &format!("mqtt://127.0.0.1:{port}"),
            "--study",
            "test-study",
            "--client-id",
            client_id,
        ])
        .env("EMPATHIC_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
        .into()
}

/// A sealed `empathic collect --central TARGET` (a file or a `postgres://` URL) of
/// `test-study` as `client_id`, opening with `keys/study.key` and signing with
/// `keys/collector.key` under `keys`.
pub fn start_sealed_collector(target: &str, port: u16, keys: &Path, client_id: &str) -> Collector {
    Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args(["collect", "--central", target])
        .args(["--broker", &format!("mqtt://127.0.0.1:{port}")])
        .args(["--study", "test-study", "--client-id", client_id])
        .args(["--study-key", path_str(&keys.join("study.key"))])
        .args(["--signing-key", path_str(&keys.join("collector.key"))])
        .env("EMPATHIC_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
        .into()
}

/// `empathic sync` arguments for `db` as `station` of `test-study` on the loopback broker.
pub fn sync_args(db: &Path, port: u16, station: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "sync",
        "--security",
        "plain",
        "--db",
        path_str(db),
        "--broker",
        &format!("mqtt://127.0.0.1:{port}"),
        "--study",
        "test-study",
        "--station",
        station,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// The message retained on `topic` that `accept` takes, waiting up to `within` for it
/// (a collector's hello is published a moment after it connects).
pub fn retained(
    port: u16,
    topic: &str,
    within: Duration,
    accept: impl Fn(&[u8]) -> bool,
) -> Option<Vec<u8>> {
    use rumqttc::{Client, Event, MqttOptions, Packet, QoS};
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let mut opts = MqttOptions::new("test-retained", "127.0.0.1", port);
        opts.set_keep_alive(Duration::from_secs(5));
        let (client, mut conn) = Client::new(opts, 4);
        client.subscribe(topic, QoS::AtLeastOnce).unwrap();
        let until = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < until {
            if let Ok(Ok(Event::Incoming(Packet::Publish(p)))) =
                conn.recv_timeout(Duration::from_millis(100))
            {
                if p.retain && accept(&p.payload) {
                    return Some(p.payload.to_vec());
                }
            }
        }
    }
    None
}

/// Publishes `payload` retained on `topic` and waits for the broker's acknowledgement.
pub fn publish_retained(port: u16, topic: &str, payload: &[u8]) {
    use rumqttc::{Client, Event, MqttOptions, Packet, QoS};
    let mut opts = MqttOptions::new("test-publisher", "127.0.0.1", port);
    opts.set_keep_alive(Duration::from_secs(5));
    let (client, mut conn) = Client::new(opts, 4);
    client
        .publish(topic, QoS::AtLeastOnce, true, payload.to_vec())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "the broker did not take {topic}");
        if let Ok(Ok(Event::Incoming(Packet::PubAck(_)))) =
            conn.recv_timeout(Duration::from_millis(100))
        {
            return;
        }
    }
}
