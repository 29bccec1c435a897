//! Redis calls as `INFO commandstats` counts them: every command a client sent and every command
//! a script ran (a `redis.call` inside a script counts under its own name, the script itself
//! under `evalsha` or `fcall`), so the total is the work Redis did, command by command. The
//! meter's own commands (`CONFIG RESETSTAT`, its earlier `INFO`s) are taken out; those of every
//! other client (each `leased` replica's scripts, subscriptions and health pings) stay in.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::{BenchResult, harness::redis::RedisServer};

/// The commands that call a script: what "scripts called" counts.
const SCRIPT_COMMANDS: [&str; 6] = [
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// Calls per command (`evalsha`, `hget`, `config|resetstat`: subcommands are their own entries).
#[derive(Clone, Debug, Default)]
pub struct Calls(BTreeMap<String, u64>);

impl Calls {
    /// Every call, scripts and the commands they ran included.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// Calls of a script (`EVALSHA`, `FCALL` and their kin).
    pub fn scripts(&self) -> u64 {
        SCRIPT_COMMANDS
            .iter()
            .filter_map(|command| self.0.get(*command))
            .sum()
    }

    /// The calls made after `earlier`, a reading of the same counters.
    pub fn since(&self, earlier: &Calls) -> Calls {
        Calls(
            self.0
                .iter()
                .map(|(command, calls)| {
                    let before = earlier.0.get(command).copied().unwrap_or(0);
                    (command.clone(), calls.saturating_sub(before))
                })
                .filter(|(_, calls)| *calls > 0)
                .collect(),
        )
    }

    /// Adds `other`'s calls to these.
    pub fn add(&mut self, other: &Calls) {
        for (command, calls) in &other.0 {
            *self.0.entry(command.clone()).or_default() += calls;
        }
    }

    /// The commands by calls, most first (by name among equals).
    fn ranked(&self) -> Vec<(&str, u64)> {
        let mut ranked: Vec<(&str, u64)> = self
            .0
            .iter()
            .map(|(command, calls)| (command.as_str(), *calls))
            .collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        ranked
    }

    /// `evalsha 1, hget 2, spublish 1`: the `most` commands with the most calls, each divided by
    /// `per` (the operations or the seconds), then `+N others` for the rest.
    pub fn breakdown(&self, per: f64, most: usize) -> String {
        let ranked = self.ranked();
        let mut parts: Vec<String> = ranked
            .iter()
            .take(most)
            .map(|(command, calls)| format!("{command} {}", per_unit(*calls as f64 / per)))
            .collect();
        let others: u64 = ranked.iter().skip(most).map(|(_, calls)| calls).sum();
        if others > 0 {
            parts.push(format!("others {}", per_unit(others as f64 / per)));
        }
        match parts.is_empty() {
            true => "none".to_owned(),
            false => parts.join(", "),
        }
    }

    /// Every command's calls divided by `per`, for `report.json`.
    pub fn to_json(&self, per: f64) -> Value {
        let per_command: serde_json::Map<String, Value> = self
            .ranked()
            .into_iter()
            .map(|(command, calls)| {
                let value = calls as f64 / per;
                (command.to_owned(), json!((value * 1000.0).round() / 1000.0))
            })
            .collect();
        per_command.into()
    }
}

/// `evalsha 2, hget 1`: the `most` commands with the most calls of a `by_command` object of
/// `report.json` (as [`Calls::to_json`] makes it).
pub fn top_commands(by_command: &Value, most: usize) -> String {
    let Value::Object(commands) = by_command else {
        return String::new();
    };
    let mut ranked: Vec<(&String, f64)> = commands
        .iter()
        .filter_map(|(command, calls)| Some((command, calls.as_f64()?)))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    ranked
        .into_iter()
        .take(most)
        .map(|(command, calls)| format!("{command} {}", per_unit(calls)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A count per operation or per second as the tables print it: whole numbers without decimals,
/// fractions with up to two.
pub fn per_unit(value: f64) -> String {
    match value >= 100.0 || value.fract() == 0.0 {
        true => crate::measure::thousands(value),
        false => {
            let text = format!("{value:.2}");
            text.trim_end_matches('0').trim_end_matches('.').to_owned()
        }
    }
}

/// Reads the counters of one Redis since its last `CONFIG RESETSTAT`, without its own commands.
pub struct CallMeter<'a> {
    redis: &'a RedisServer,
    /// `INFO`s this meter sent since the reset: each is counted in the readings after it.
    infos: u64,
}

impl<'a> CallMeter<'a> {
    /// `CONFIG RESETSTAT`: counting starts from zero now.
    pub fn reset(redis: &'a RedisServer) -> BenchResult<Self> {
        redis.query(&["CONFIG", "RESETSTAT"])?;
        Ok(CallMeter { redis, infos: 0 })
    }

    /// Every call since the reset, the meter's own taken out.
    pub fn read(&mut self) -> BenchResult<Calls> {
        let info = self.redis.query(&["INFO", "commandstats"])?;
        let text = info.as_str().ok_or("INFO commandstats answered no text")?;
        let mut calls = parse(text)?;
        calls.0.remove("config|resetstat");
        if let Some(infos) = calls.0.get_mut("info") {
            *infos = infos.saturating_sub(self.infos);
        }
        calls.0.retain(|_, calls| *calls > 0);
        self.infos += 1;
        Ok(calls)
    }
}

/// `cmdstat_evalsha:calls=12,usec=...` lines into calls per command.
fn parse(info: &str) -> BenchResult<Calls> {
    let mut calls = BTreeMap::new();
    for line in info.lines() {
        let Some((command, stats)) = line
            .trim()
            .strip_prefix("cmdstat_")
            .and_then(|rest| rest.split_once(':'))
        else {
            continue;
        };
        let count = stats
            .split(',')
            .find_map(|field| field.strip_prefix("calls="))
            .ok_or_else(|| format!("INFO commandstats: no calls in {line:?}"))?;
        calls.insert(command.to_owned(), count.parse()?);
    }
    Ok(Calls(calls))
}
