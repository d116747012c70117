//! The config's sections: one struct per TOML table with its documented defaults
//! (`firmware-config/station.toml` lists them); [`super::Config`] holds one of each. Grouped
//! by concern: the station and its capture ([`capture`]), what is computed from the media
//! ([`sensing`]), and where sessions go ([`sync`]).

use super::*;

mod capture;
mod sensing;
mod sync;

pub use capture::*;
pub use sensing::*;
pub use sync::*;
