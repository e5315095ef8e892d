//! `baton`: parses the command line and exits with the status the library
//! gives. All the work is in the `baton_cli` library.

fn main() {
    std::process::exit(baton_cli::run(std::env::args_os()));
}
