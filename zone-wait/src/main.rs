//! `loki-zone-wait --file FILE [--field FIELD] [--timeout 10m] [--interval 1s]`: exits 0
//! printing the zone once FILE holds one; 1 after the timeout, saying what to check; 2 on
//! a usage error.

use std::process::ExitCode;

use loki_zone_wait::{parse_args, wait_for_zone, Parsed};

const USAGE: &str =
    "usage: loki-zone-wait --file FILE [--field FIELD] [--timeout 10m] [--interval 1s]

Waits until FILE (a downward-API file that mirrors the pod's zone) is non-empty, prints
the zone and exits 0; exits 1 after --timeout. --field names the pod field FILE mirrors,
for the message.";

fn main() -> ExitCode {
    match parse_args(std::env::args().skip(1)) {
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Parsed::Version) => {
            println!("loki-zone-wait {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Ok(Parsed::Run(a)) => {
            match wait_for_zone(&a.file, a.field.as_deref(), a.timeout, a.interval) {
                Ok(zone) => {
                    println!("{zone}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
