//! Reads one structural tag (JSON) per line on stdin and prints, per line, `ok` or `error: …`
//! as xgrammar's `Grammar::from_structural_tag` answers. Exits 0 when every tag compiled.
use std::io::{self, BufRead, Write};

fn main() {
    let stdin = io::stdin();
    let mut out = io::stdout().lock();
    let mut failed = false;
    for line in stdin.lock().lines() {
        let line = line.expect("stdin is UTF-8 text");
        if line.trim().is_empty() {
            continue;
        }
        match xgrammar::Grammar::from_structural_tag(&line, None) {
            Ok(_) => writeln!(out, "ok").unwrap(),
            Err(err) => {
                failed = true;
                writeln!(out, "error: {err:?}").unwrap();
            }
        }
    }
    std::process::exit(if failed { 1 } else { 0 });
}
