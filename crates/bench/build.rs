//! Records the source tree's commit for `nicmsg bench`'s results (`unknown` outside git).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_owned())
}

fn main() {
    let commit = git(&["describe", "--always", "--dirty"]).unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=NICMSG_BUILD_COMMIT={commit}");
    // Run again when HEAD, its branch or the index changes. The paths come from git: in a linked
    // worktree `.git` is a file, and a path that does not exist would rerun this script (and
    // rebuild the crate) on every build.
    let mut watched = vec!["HEAD".to_owned(), "index".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    let mut any = false;
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
                any = true;
            }
        }
    }
    if !any {
        // Not a git checkout: the commit stays `unknown`.
        println!("cargo:rerun-if-changed=build.rs");
    }
}
