//! The contention harness behind `baton bench`: workers, as threads or as
//! processes (`baton bench-worker`, which this harness starts), race over
//! one store; every grant is checked (no task granted twice, none lost) and
//! the rates are compared across stores in one run. `--next` drains a
//! layered work graph with `next` beside the same graph claimed by id.
//! [`demo`] is `baton demo`: the guarantees shown on one store, a
//! supervised run (`baton-supervisor`) among them.
//!
//! The CLI parses the arguments (the clap types here) and prints the
//! [`Report`]; the rest of the harness lives in this crate, so the CLI is
//! transport only.

mod bench;
pub mod demo;
mod next;

pub use bench::{order_for, run, run_worker};

use baton_core::call::{Output, Status};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// What a run leaves for the CLI to print: its output, or (`text`) a
/// markdown table to print instead, with the output's status.
#[derive(Debug)]
pub struct Report {
    pub output: Output,
    pub text: Option<String>,
}

impl Report {
    fn one(v: serde_json::Value) -> Report {
        Report {
            output: Output::one(v),
            text: None,
        }
    }

    fn with_status(mut self, status: Status) -> Report {
        self.output.status = status;
        self
    }

    fn list(items: Vec<serde_json::Value>, status: Status) -> Report {
        let mut output = Output::list(items, None);
        output.status = status;
        Report { output, text: None }
    }

    fn text(text: String, status: Status) -> Report {
        let mut output = Output::list(Vec::new(), None);
        output.status = status;
        Report {
            output,
            text: Some(text),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Order {
    /// Every worker tries every task, each in its own random order.
    Shuffled,
    /// Every worker tries every task in the same order: the lock-step worst case.
    Same,
    /// Each worker gets its own share of the tasks: a queue without contention.
    Disjoint,
    /// The tasks are added first, all ready, in a queue of the run's own;
    /// each worker takes the next one (`next`) and completes it until
    /// none is left: a job queue's fetch.
    Next,
}

impl Order {
    pub fn as_str(self) -> &'static str {
        match self {
            Order::Shuffled => "shuffled",
            Order::Same => "same",
            Order::Disjoint => "disjoint",
            Order::Next => "next",
        }
    }
}

#[derive(Debug, Args, Clone)]
pub struct BenchArgs {
    /// How many workers race (default 8).
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// How many tasks they race for (default 1000).
    #[arg(long, default_value_t = 1000)]
    pub tasks: usize,
    /// Run each worker as its own OS process.
    #[arg(long)]
    pub processes: bool,
    /// With --processes: each process runs this many workers at once on
    /// one store handle (8 processes x 8 connections through a server).
    #[arg(long, default_value_t = 1, requires = "processes")]
    pub connections: usize,
    /// The order workers try tasks in.
    #[arg(long, value_enum, default_value_t = Order::Shuffled)]
    pub order: Order,
    /// Also run the same benchmark on these stores, in the same run (repeatable).
    #[arg(long)]
    pub compare: Vec<String>,
    /// Run workers = 1, 2, 4, 8, 16, 64 and write a markdown table and an SVG chart.
    #[arg(long)]
    pub series: bool,
    /// Where --series writes bench.md and bench.svg.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Drain a layered work graph of --tasks with `next`, beside the same
    /// graph claimed by id in its order (and as many tasks without
    /// dependencies claimed by id), on the same store in the same run.
    #[arg(long, conflicts_with_all = ["processes", "series"])]
    pub next: bool,
    /// With --next: the graph's layers (1: no dependencies at all).
    #[arg(long, default_value_t = 20, requires = "next")]
    pub layers: usize,
    /// With --next: rounds of the three runs, each on fresh tasks, the
    /// graph by id first in odd rounds and `next` first in even ones (the
    /// store grows as a run goes); each figure is the median over rounds.
    #[arg(long, default_value_t = 1, requires = "next", value_parser = clap::value_parser!(u64).range(1..=99))]
    pub rounds: u64,
    /// With --next or --order next: each `next` takes up to N grants in
    /// one commit (`next --count`) and they are reported in one call
    /// (`report`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub count: u32,
}

#[derive(Debug, Args, Clone)]
pub struct BenchWorkerArgs {
    /// This process's first worker number.
    #[arg(long)]
    pub worker: usize,
    /// How many workers the whole run has.
    #[arg(long)]
    pub workers: usize,
    /// How many tasks the whole run has.
    #[arg(long)]
    pub tasks: usize,
    /// The order workers try tasks in.
    #[arg(long, value_enum)]
    pub order: Order,
    /// The run's task id prefix.
    #[arg(long)]
    pub prefix: String,
    /// Workers `worker..worker+connections` of `workers`, at once.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Start when this file exists.
    #[arg(long)]
    pub go: PathBuf,
    /// With --order next: grants a `next` may take at once.
    #[arg(long, default_value_t = 1)]
    pub count: u32,
}
