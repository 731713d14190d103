//! Writes hand-written channel-level plans as JSON into a folder, for `WEFT_PLAN_DIR`: a
//! one-shot all-reduce by read-reduce over memory channels (`read_reduce_allreduce`, any rank
//! count), the same with every rank's fold split over a thread-block group of three
//! (`grouped_read_reduce_allreduce`) and, at two ranks, an all-reduce by LL packets
//! (`packet_allreduce_ll`).
//!
//! ```sh
//! cargo run --example channel_program -- plans/ 2
//! WEFT_PLAN_DIR=plans/ weft selftest --only plan
//! ```

use weft_plan::dsl::{Buffer, ChannelProgram, Collective};
use weft_plan::plan::{BufRef, Protocol};

fn chunk(buffer: Buffer) -> BufRef {
    BufRef::new(buffer, 0, 1)
}

/// Every rank folds every peer's input into its output, reading the peers' memory.
fn read_reduce_allreduce(n: u32) -> Result<ChannelProgram, Box<dyn std::error::Error>> {
    let mut p = ChannelProgram::new("read_reduce_allreduce", Collective::all_reduce(n, 1)?);
    for r in 0..n {
        let channels = (1..n).map(|k| p.memory_channel(r, (r + k) % n, 0)).collect::<Result<Vec<_>, _>>()?;
        let mut tb = p.threadblock(r, 0)?;
        let (input, output) = (chunk(Buffer::Input), chunk(Buffer::Output));
        for (k, ch) in channels.iter().enumerate() {
            let local = if k == 0 { input } else { output };
            tb.read_reduce(ch, local, input, output);
        }
    }
    Ok(p)
}

/// [`read_reduce_allreduce`] with every rank's fold split over thread blocks 0, 1 and 2, each
/// folding its part of the chunk over its own channels, then staging its part in scratch and
/// back (a copy per member).
fn grouped_read_reduce_allreduce(n: u32) -> Result<ChannelProgram, Box<dyn std::error::Error>> {
    let mut p = ChannelProgram::new("grouped_read_reduce_allreduce", Collective::all_reduce(n, 1)?);
    let (input, output) = (chunk(Buffer::Input), chunk(Buffer::Output));
    for r in 0..n {
        let staged = p.scratch(r, &[0])?;
        let mut channels = Vec::new();
        for k in 1..n {
            channels.push((0..3).map(|c| p.memory_channel(r, (r + k) % n, c)).collect::<Result<Vec<_>, _>>()?);
        }
        let mut group = p.threadblock_group(r, &[0, 1, 2])?;
        for (k, per_member) in channels.iter().enumerate() {
            group.read_reduce(per_member, if k == 0 { input } else { output }, input, output);
        }
        group.copy(output, staged).copy(staged, output);
    }
    Ok(p)
}

/// Two ranks: each puts its input as packets into the peer's scratch and folds the peer's.
fn packet_allreduce() -> Result<ChannelProgram, Box<dyn std::error::Error>> {
    let mut p = ChannelProgram::new("packet_allreduce_ll", Collective::all_reduce(2, 1)?).with_protocol(Protocol::Ll);
    for r in 0..2 {
        let staged = p.scratch(r, &[0])?;
        let ch = p.memory_channel(r, 1 - r, 0)?;
        let mut tb = p.threadblock(r, 0)?;
        tb.put_packets(&ch, chunk(Buffer::Input), staged);
        tb.recv_reduce(&ch, chunk(Buffer::Input), staged, chunk(Buffer::Output));
    }
    Ok(p)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().ok_or("usage: channel_program <folder> [ranks]")?);
    let ranks: u32 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(2);
    std::fs::create_dir_all(&dir)?;
    let mut programs = vec![read_reduce_allreduce(ranks)?, grouped_read_reduce_allreduce(ranks)?];
    if ranks == 2 {
        programs.push(packet_allreduce()?);
    }
    for program in programs {
        let plan = program.compile()?;
        let path = dir.join(format!("{}.json", plan.name));
        std::fs::write(&path, plan.to_json()?)?;
        println!("{} ({} ops) -> {}", plan.name, plan.op_count(), path.display());
    }
    Ok(())
}
