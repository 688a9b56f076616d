//! The `nicmsg` command; everything is in the `nicmsg_cli` library.

fn main() {
    std::process::exit(nicmsg_cli::main_with_args(std::env::args_os()));
}
