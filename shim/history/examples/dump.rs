//! Prints what a history file says: `cargo run -p cuguard-history --example dump -- FILE...`
//! (segments oldest first).
use cuguard_history::replay::Replay;

fn main() {
    let files: Vec<Vec<u8>> = std::env::args()
        .skip(1)
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let refs: Vec<&[u8]> = files.iter().map(|f| &f[..]).collect();
    let r = Replay::read(&refs).unwrap();
    println!(
        "pid {} blocks {} segments {} ooms {} lost {} stacks {} modules {} codes {} span {}..{} ns whole {} cut {:?} unmatched {}",
        r.pid,
        r.blocks.len(),
        r.segments.len(),
        r.ooms.len(),
        r.lost_events(),
        r.stacks.len(),
        r.modules.len(),
        r.codes.len(),
        r.begins_ns,
        r.ends_ns,
        r.whole,
        r.cut,
        r.unmatched_frees
    );
    for b in r.blocks.iter().filter(|b| b.size >= 4 << 20).take(20) {
        println!(
            "  {:>12} {:?}..{:?} ms  stack {} {:?}",
            b.size,
            b.start_ns / 1_000_000,
            b.end_ns.map(|e| e / 1_000_000),
            b.stack,
            b.memory
        );
    }
    println!("peak {:?}", r.peak(None));
}
