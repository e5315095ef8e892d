//! Unit tests of `lib.rs`.

use super::*;

#[test]
fn every_error_kind_has_its_exit_status() {
    assert_eq!(exit_code_for(&Error::invalid("f", "r")), exit::INVALID);
    assert_eq!(exit_code_for(&Error::unavailable("x")), exit::UNAVAILABLE);
    assert_eq!(exit_code_for(&Error::corrupt("x")), exit::UNAVAILABLE);
    assert_eq!(exit_code_for(&Error::unsupported("x")), exit::UNAVAILABLE);
    assert_eq!(
        exit_code_for(&Error::indeterminate("x")),
        exit::INDETERMINATE
    );
}

/// The CLI maps onto core's catalogue: every operation with a command
/// has it, and every command is an operation or one of the few that
/// are not (they run things, rather than ask the store one thing).
#[test]
fn every_command_is_an_operation_of_the_catalogue() {
    use clap::CommandFactory;
    let cli = Cli::command();
    let find = |path: &str| {
        let mut c = &cli;
        for word in path.split(' ') {
            c = c.find_subcommand(word)?;
        }
        Some(c.clone())
    };
    let ops: Vec<&str> = catalogue::OPERATIONS.iter().filter_map(|o| o.cli).collect();
    for cmd in &ops {
        assert!(
            find(cmd).is_some(),
            "the catalogue's `{cmd}` is not a command"
        );
    }
    let not_operations = [
        "run",
        "task run",
        "schedule run",
        "demo",
        "serve",
        "bench",
        "bench-worker",
        "completions",
        "help",
        // The guards act on the user's own storage, not on an authority.
        "guard keygen",
        "guard install",
        "guard write",
        "guard sql",
        "guard show",
    ];
    fn leaves(c: &clap::Command, prefix: &str, out: &mut Vec<String>) {
        for sub in c.get_subcommands() {
            let path = format!("{prefix}{}", sub.get_name());
            if sub.has_subcommands() {
                leaves(sub, &format!("{path} "), out);
            } else {
                out.push(path);
            }
        }
    }
    let mut all = Vec::new();
    leaves(&cli, "", &mut all);
    for cmd in all {
        assert!(
            ops.contains(&cmd.as_str()) || not_operations.contains(&cmd.as_str()),
            "`{cmd}` is neither an operation of the catalogue nor a command that runs things"
        );
    }
}

/// Every command says what it does and shows at least one example;
/// every option and argument says what it is.
#[test]
fn every_command_and_option_has_help_and_every_command_an_example() {
    use clap::CommandFactory;
    fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for sub in c.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            let p = format!("{path}{}", sub.get_name());
            if sub.get_about().is_none() {
                missing.push(format!("`{p}`: no description"));
            }
            for a in sub.get_arguments() {
                let id = a.get_id().as_str();
                if a.is_global_set() || matches!(id, "help" | "version") {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("`{p}`: `{id}` has no help"));
                }
            }
            if sub.has_subcommands() {
                walk(sub, &format!("{p} "), missing);
            } else {
                let long = sub
                    .get_long_about()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                let after = sub
                    .get_after_long_help()
                    .or(sub.get_after_help())
                    .map(ToString::to_string)
                    .unwrap_or_default();
                if !long.contains("Example: baton ") && !after.contains("Example: baton ") {
                    missing.push(format!("`{p}`: no example"));
                }
            }
        }
    }
    let mut missing = Vec::new();
    walk(&Cli::command(), "", &mut missing);
    assert!(
        missing.is_empty(),
        "{} gaps:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn task_declare_help_shows_a_manifest_that_parses() {
    use clap::CommandFactory;
    let cli = Cli::command();
    let declare = cli
        .find_subcommand("task")
        .and_then(|t| t.find_subcommand("declare"))
        .map(|d| {
            d.get_long_about()
                .map(ToString::to_string)
                .unwrap_or_default()
        })
        .unwrap_or_default();
    assert!(declare.contains("docs/manifest.json"), "{declare}");
    let example = declare
        .split("Example: echo '")
        .nth(1)
        .and_then(|r| r.split('\'').next())
        .unwrap_or_else(|| panic!("no piped example in {declare}"));
    baton_core::Manifest::from_json(example).expect("the help's manifest is valid");
}

#[test]
fn durations() {
    assert_eq!(parse_ttl(Some("750ms")).unwrap(), Some(750));
    assert_eq!(parse_ttl(Some("30s")).unwrap(), Some(30_000));
    assert_eq!(parse_ttl(Some("5m")).unwrap(), Some(300_000));
    assert_eq!(parse_ttl(Some("2h")).unwrap(), Some(7_200_000));
    assert_eq!(parse_ttl(Some("7d")).unwrap(), Some(604_800_000));
    for bad in ["0s", "8d", "30", "5 fortnights", "-1s", ""] {
        assert_eq!(
            parse_ttl(Some(bad)).unwrap_err().field.as_deref(),
            Some("ttl"),
            "{bad}"
        );
    }
}

/// Every example of an operation's help is made by core into its Call:
/// each field a command has is an input its operation reads (a field
/// core does not read would be refused by name).
#[test]
fn every_example_of_an_operation_is_made_by_core() {
    use clap::CommandFactory;
    fn examples(c: &clap::Command, out: &mut Vec<String>) {
        for sub in c.get_subcommands() {
            examples(sub, out);
            let long = sub
                .get_long_about()
                .map(ToString::to_string)
                .unwrap_or_default();
            out.extend(
                long.lines()
                    .filter_map(|l| l.trim().strip_prefix("Example: "))
                    .map(str::to_owned),
            );
        }
    }
    let mut all = Vec::new();
    examples(&Cli::command(), &mut all);
    let mut made = 0;
    for line in all
        .iter()
        .filter(|l| !l.contains(['"', '\'', '{', '(', '`']))
    {
        // Up to a pipe, an && or a redirection.
        let words = line.split(['|', '&', '>']).next().unwrap_or(line);
        let cli = parse_cli(words.split_whitespace().map(Into::into).collect())
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        if matches!(
            cli.command,
            Command::Run { .. }
                | Command::Task(TaskCommand::Run { .. })
                | Command::Demo
                | Command::Serve { .. }
                | Command::Bench(_)
                | Command::BenchWorker(_)
                | Command::Completions { .. }
                | Command::Guard(_)
        ) {
            continue;
        }
        match plan(&cli.command) {
            Ok(_) => made += 1,
            // An example's file is not here to read.
            Err(e) if e.field.as_deref() == Some("file") && e.message.contains("cannot read") => {}
            Err(e) => panic!("{line}: {e}"),
        }
    }
    assert!(made >= 30, "only {made} examples made");
}
