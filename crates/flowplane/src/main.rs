//! The `flowplane` command: thin front end over the engine crates.
//!
//! Layer: **cli**. It parses arguments, builds what the command needs, and prints results.
#![deny(unsafe_code)]

use anyhow::Result;
use clap::{Parser, Subcommand};

mod bench;
mod sys;

#[derive(Parser, Debug)]
#[command(
    name = "flowplane",
    version,
    about = "A software dataplane with very large tables"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a benchmark: prints a table; `--json FILE` writes records, `--quick` is a one-minute smoke run.
    Bench {
        #[command(subcommand)]
        which: Box<bench::BenchCmd>,
    },
    /// The main job with an embedded default: a quick FIB benchmark against hashbrown and dashmap.
    Demo,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench { which } => bench::run(*which),
        Command::Demo => bench::fib::run(bench::fib::FibArgs::demo()),
    }
}
