//! Reaching the broker: its address, how a client proves itself to it (TLS, credentials
//! read from files) and what a failed connection tells the user to check.

use rumqttc::MqttOptions;

use super::{BrokerAddress, SyncError};

/// How a client proves itself to the broker and checks the broker: TLS (rustls, the CA
/// file the broker's certificate must chain to, optionally a client certificate and key,
/// PEM), and a username with a password read from a file (never from the command line,
/// where other users see it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BrokerAuth {
    pub tls: bool,
    pub ca_file: Option<std::path::PathBuf>,
    pub client_cert: Option<std::path::PathBuf>,
    pub client_key: Option<std::path::PathBuf>,
    pub username: Option<String>,
    pub password_file: Option<std::path::PathBuf>,
}

impl BrokerAuth {
    /// From `[sync]` and the address's scheme; empty paths and names mean none.
    pub fn from_config(c: &crate::config::SyncConfig, tls: bool) -> Self {
        let path = |p: &std::path::Path| (!p.as_os_str().is_empty()).then(|| p.to_path_buf());
        Self {
            tls,
            ca_file: path(&c.ca_file),
            client_cert: path(&c.client_cert),
            client_key: path(&c.client_key),
            username: (!c.username.is_empty()).then(|| c.username.clone()),
            password_file: path(&c.password_file),
        }
    }

    /// Sets credentials and TLS on `opts`, reading the files now (an unreadable one is an
    /// error naming it and the setting).
    pub fn apply(&self, opts: &mut MqttOptions) -> Result<(), SyncError> {
        let read = |p: &std::path::Path, setting: &str| {
            std::fs::read(p)
                .map_err(|e| SyncError::Auth(format!("cannot read {setting} {}: {e}", p.display())))
        };
        if let Some(user) = &self.username {
            let password = match &self.password_file {
                Some(p) => String::from_utf8_lossy(&read(p, "sync.password_file")?)
                    .trim_end_matches(['\n', '\r'])
                    .to_string(),
                None => String::new(),
            };
            opts.set_credentials(user.clone(), password);
        }
        if self.tls {
            let ca_path = self.ca_file.as_deref().ok_or_else(|| {
                SyncError::Auth("an mqtts:// broker needs the CA file its certificate chains to (sync.ca_file, --ca)".into())
            })?;
            let ca = read(ca_path, "sync.ca_file")?;
            let client_auth = match (&self.client_cert, &self.client_key) {
                (Some(c), Some(k)) => {
                    Some((read(c, "sync.client_cert")?, read(k, "sync.client_key")?))
                }
                (None, None) => None,
                _ => {
                    return Err(SyncError::Auth(
                        "a client certificate needs both sync.client_cert and sync.client_key"
                            .into(),
                    ))
                }
            };
            // rustls with ring (no C build); installing twice is harmless.
            let _ = rustls::crypto::ring::default_provider().install_default();
            opts.set_transport(rumqttc::Transport::tls_with_config(
                rumqttc::TlsConfiguration::Simple {
                    ca,
                    alpn: None,
                    client_auth,
                },
            ));
        }
        Ok(())
    }
}

/// Parses `mqtt://HOST:PORT` or `mqtts://HOST:PORT`.
pub fn parse_broker(url: &str) -> Result<BrokerAddress, SyncError> {
    crate::config::broker_address(url).map_err(|_| SyncError::Address(url.into()))
}

/// A connection error with what to check: credentials, or the CA.
pub fn describe(e: &rumqttc::ConnectionError) -> String {
    use rumqttc::{ConnectReturnCode, ConnectionError};
    match e {
        ConnectionError::ConnectionRefused(
            code @ (ConnectReturnCode::BadUserNamePassword | ConnectReturnCode::NotAuthorized),
        ) => format!(
            "the broker refused the credentials ({code:?}): check sync.username and sync.password_file"
        ),
        ConnectionError::Tls(t) => format!(
            "TLS with the broker failed: {t} (is sync.ca_file the CA that signed the broker's certificate, and the host the one it names?)"
        ),
        other => other.to_string(),
    }
}
