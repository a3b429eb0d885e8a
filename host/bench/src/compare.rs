//! `deployd bench compare --engine-bin OLD -- api --nodes 2000`: one bench, run by this
//! build and by a previous one (`--engine-bin`, a `deployd` built with `--features
//! bench`), alternated `--rounds` times (who goes first alternates too), each figure's
//! median for both and their ratio, the load average beside every run.
//!
//! Benches print figures as `what: … number unit …` lines; a figure is a number after
//! the line's first colon whose value differs between runs (a constant, such as a count
//! asked for, is not a measurement). Each is named by the line's label and the word
//! before it, so nothing here knows any one bench's output.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;

#[derive(Clone, Debug, clap::Args)]
pub struct CompareBench {
    /// The previous build's `deployd` (made with `--features bench`).
    #[arg(long)]
    pub engine_bin: PathBuf,
    /// Runs of each build, alternated.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The bench and its arguments, as given to `deployd bench`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub bench: Vec<String>,
}

/// A figure's place: the line's shape (numbers blanked) and which number on it.
type Place = (String, usize);

/// Every run's figures, by build (0: this one, 1: the previous one) and place.
#[derive(Default)]
struct Runs {
    values: BTreeMap<Place, [Vec<f64>; 2]>,
    names: BTreeMap<Place, String>,
}

pub fn run_compare(args: &CompareBench) -> anyhow::Result<()> {
    let this = std::env::current_exe()?;
    let builds = [this.as_path(), args.engine_bin.as_path()];
    let mut runs = Runs::default();
    for round in 0..args.rounds {
        for i in [round % 2, 1 - round % 2] {
            let load = super::load_average();
            let out = Command::new(builds[i])
                .arg("bench")
                .args(&args.bench)
                .env("RUST_LOG", "error")
                .output()
                .with_context(|| format!("running {}", builds[i].display()))?;
            anyhow::ensure!(
                out.status.success(),
                "{} bench {} failed: {}",
                builds[i].display(),
                args.bench.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
            println!(
                "round {} · {} · load average before {load}",
                round + 1,
                ["this build", "previous build"][i]
            );
            runs.add(i, &String::from_utf8_lossy(&out.stdout));
        }
    }
    println!(
        "\nmedians of {} runs each: this build / previous build",
        args.rounds
    );
    for (place, [this, previous]) in &runs.values {
        let varies = this.iter().chain(previous).any(|v| *v != this[0]);
        if this.len() != args.rounds || previous.len() != args.rounds || !varies {
            continue;
        }
        let (a, b) = (median(this), median(previous));
        println!(
            "{}: {a} / {b} = {:.2}×",
            runs.names[place],
            if b == 0.0 { f64::NAN } else { a / b }
        );
    }
    Ok(())
}

impl Runs {
    fn add(&mut self, build: usize, output: &str) {
        for line in output.lines() {
            let Some((label, rest)) = line.split_once(": ") else {
                continue;
            };
            let mut shape = format!("{label}:");
            let mut before = "";
            let mut k = 0;
            for token in rest.split_whitespace() {
                let Some((value, unit)) = number(token) else {
                    shape.push(' ');
                    shape.push_str(token);
                    before = token;
                    continue;
                };
                shape.push_str(" #");
                shape.push_str(unit);
                let place = (shape.clone(), k);
                self.names
                    .entry(place.clone())
                    .or_insert_with(|| format!("{label} · {before} [{unit}]"));
                self.values.entry(place).or_default()[build].push(value);
                k += 1;
            }
        }
    }
}

/// `27137.12` → 27137.12, `1.42ms` → (1.42, "ms"), `(4,672` → 4672; words are not numbers.
fn number(token: &str) -> Option<(f64, &str)> {
    let token = token.trim_start_matches(['(', '=']);
    let end = token
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(token.len());
    let digits = token[..end].replace(',', "");
    let unit = token[end..].trim_end_matches([',', ')', ';']);
    if digits.is_empty() || !digits.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    digits.trim_end_matches('.').parse().ok().map(|v| (v, unit))
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
