//! `nicmsg-bench`: the program behind `nicmsg bench` (see `docs/benchmarks.md`); everything is
//! in [`nicmsg_bench::command`].

fn main() {
    std::process::exit(nicmsg_bench::command::main_with_args(std::env::args_os()));
}
