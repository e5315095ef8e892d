//! `baton`: parses the command line and exits with the status the library
//! gives. All the work is in the `baton_cli` library.

/// The allocator of baton's own executables (the CLI, `baton serve`, the
/// bench workers). glibc's malloc slows as the heap grows: with 10^5 tasks
/// in sled's page cache, `_int_malloc` went from 6% to 22% of `next`'s
/// samples and `next` from about 0.95 to 1.8 ms; with mimalloc both sizes
/// cost the same (`benches/README.md`, "`next` as the queue grows"). The
/// libraries leave the choice to whoever embeds them. Built without its
/// transparent huge pages (`no_thp`): with them, each 2 MiB page it took
/// back from the kernel after a purge was zeroed on first touch, a quarter
/// of `baton serve`'s samples under batches of grants.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(baton_cli::run(std::env::args_os()));
}
