//! `weft model`: the α-β cost model and event simulator of the multi-node AllReduce
//! algorithms (weft-model), for node counts no machine here has.
//!
//! - `weft model calibrate` derives the parameters from the JSON weft's benchmarks already
//!   wrote (it measures nothing, so it runs without a GPU): NVLink from a `weft bench p2p
//!   --channel memory --json` file, the proxy's cost from a `weft bench fifo --json` file, the
//!   network from a `weft bench p2p --json` file measured across nodes, else from the flags,
//!   else from the emulated NIC's `WEFT_EMU_NET_LATENCY_US` / `WEFT_EMU_NET_GBPS`;
//! - `weft model predict` prints every algorithm's closed-form time per size (and with `--sim`
//!   the simulator's next to it), the best, and optionally plots them.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use weft_core::LinkModel;
use weft_model::calibrate::{link_from_p2p, proxy_one_way_us_from_gin, proxy_us_from_fifo, proxy_us_from_gin_stream};
use weft_model::params::{ParamsFile, alpha_us, gbps};
use weft_model::{Algorithm, Params, Schedule, Shape, closed_form, sim};

use crate::harness::plot::{PALETTE, Panel, Series, XAxis, write};
use crate::harness::sweep::{format_size, parse_size_range, sizes_between};

/// `weft model`'s actions.
#[derive(clap::Subcommand, Debug)]
pub enum ModelAction {
    /// Derive the model's parameters from benchmark JSON (no GPU needed) and write them.
    Calibrate(CalibrateArgs),
    /// Predict every algorithm's AllReduce time on N nodes of G GPUs.
    Predict(PredictArgs),
}

/// The options of `weft model calibrate`.
#[derive(clap::Args, Debug)]
pub struct CalibrateArgs {
    /// `weft bench p2p --channel memory --json` output: NVLink α (smallest row) and β (largest).
    #[arg(long)]
    pub nvlink_json: Option<PathBuf>,
    /// `weft bench fifo --json` output: the proxy's cost per message (one thread's best rate).
    #[arg(long)]
    pub fifo_json: Option<PathBuf>,
    /// `weft bench p2p --json` output measured between two nodes: the network's α and β (the
    /// α also that of a step of the PortChannel algorithms).
    #[arg(long)]
    pub net_json: Option<PathBuf>,
    /// `weft bench gin --json` output: the network's α is its one-way put + signal latency
    /// through the proxy (what an algorithm's crossing costs), in place of --net-json's; the
    /// proxy's cost per put is its stream's smallest message, in place of --fifo-json's.
    #[arg(long)]
    pub gin_json: Option<PathBuf>,
    /// Parameters given as flags.
    #[command(flatten)]
    pub links: LinkArgs,
    /// Where to write the parameters.
    #[arg(short, long, default_value = "weft-model.json")]
    pub out: PathBuf,
}

/// Parameters given on the command line (each overrides the file's or the default).
#[derive(clap::Args, Debug, Default)]
pub struct LinkArgs {
    /// NVLink α, µs.
    #[arg(long)]
    pub nvlink_alpha_us: Option<f64>,
    /// NVLink β, GB/s.
    #[arg(long)]
    pub nvlink_gbps: Option<f64>,
    /// Network α, µs.
    #[arg(long)]
    pub net_alpha_us: Option<f64>,
    /// Network β per NIC, GB/s.
    #[arg(long)]
    pub net_gbps: Option<f64>,
    /// α of a step of weft's PortChannel algorithms (ring, allpairs) across the network, µs
    /// (default: the network's α).
    #[arg(long)]
    pub port_alpha_us: Option<f64>,
    /// Proxy CPU cost per posted message, µs (simulator; NVRAR's puts in `weft bench`'s model).
    #[arg(long)]
    pub proxy_us: Option<f64>,
    /// η: wire bytes per data byte of NVRAR's LL transfers.
    #[arg(long)]
    pub eta: Option<f64>,
    /// GPUs sharing one NIC (simulator; the closed forms assume one NIC per GPU).
    #[arg(long)]
    pub gpus_per_nic: Option<usize>,
}

/// The options of `weft model predict`.
#[derive(clap::Args, Debug)]
pub struct PredictArgs {
    /// Nodes.
    #[arg(long)]
    pub nodes: usize,
    /// GPUs per node.
    #[arg(long)]
    pub gpus_per_node: usize,
    /// Algorithms (comma-separated) or `all`.
    #[arg(long, default_value = "all")]
    pub algo: String,
    /// Smallest size (e.g. 128K).
    #[arg(short = 'b', long, default_value = "1K")]
    pub min_bytes: String,
    /// Largest size.
    #[arg(short = 'e', long, default_value = "64M")]
    pub max_bytes: String,
    /// Size multiplier.
    #[arg(short = 'f', long, default_value_t = 2)]
    pub factor: usize,
    /// Also run the event simulator and print its times next to the closed forms.
    #[arg(long)]
    pub sim: bool,
    /// `A,B`: a column of B's time over A's (A's speedup over B); repeat for more columns.
    #[arg(long)]
    pub ratio: Vec<String>,
    /// Parameters written by `weft model calibrate` (flags override them).
    #[arg(long)]
    pub params: Option<PathBuf>,
    /// Parameters given as flags.
    #[command(flatten)]
    pub links: LinkArgs,
    /// Plot the times into this PNG (SVG if it ends in .svg).
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// Runs a `weft model` action.
pub fn run(action: &ModelAction) -> Result<ExitCode, Box<dyn Error>> {
    match action {
        ModelAction::Calibrate(args) => calibrate(args),
        ModelAction::Predict(args) => predict(args),
    }
}

/// Parameters when neither a file nor a flag gives them: NVLink as `weft model calibrate`
/// fits docs/perf/data/proxy-2xh200/p2p-memory.json (H200 NVLink, one put per launch), a
/// 2 µs, 50 GB/s NIC per GPU (an InfiniBand NDR/400G port), no proxy cost, LL8's η = 2.
fn default_params() -> Params {
    Params::new(LinkModel::new(2.77, Some(370.0)), LinkModel::new(2.0, Some(50.0)))
}

/// A parameter file written by `weft model calibrate`, its values checked.
pub fn read_params_file(path: &Path) -> Result<ParamsFile, Box<dyn Error>> {
    let file =
        serde_json::from_value::<ParamsFile>(read_json(path)?).map_err(|e| format!("{}: {e}", path.display()))?;
    file.params().map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(file)
}

fn read_json(path: &Path) -> Result<serde_json::Value, Box<dyn Error>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?)
}

/// `params` with every flag given applied; the names of the flags, for the record.
fn apply(links: &LinkArgs, mut params: Params) -> Result<(Params, Vec<String>), Box<dyn Error>> {
    let mut given = Vec::new();
    let mut link = |link: &mut LinkModel, alpha: Option<f64>, beta: Option<f64>, name: &str| {
        if alpha.is_some() || beta.is_some() {
            *link = weft_model::params::link(name, alpha.unwrap_or(alpha_us(link)), beta.or(gbps(link)))?;
            given.push(format!("{name} from the command line"));
        }
        Ok::<(), weft_model::ModelError>(())
    };
    link(&mut params.nvlink, links.nvlink_alpha_us, links.nvlink_gbps, "NVLink")?;
    link(&mut params.net, links.net_alpha_us, links.net_gbps, "network")?;
    if let Some(us) = links.port_alpha_us {
        params.port_alpha_us = Some(us);
        given.push("PortChannel α from the command line".into());
    }
    if let Some(us) = links.proxy_us {
        params.proxy_us = us;
        given.push("proxy cost from the command line".into());
    }
    if let Some(eta) = links.eta {
        params.ll_factor = eta;
        given.push("η from the command line".into());
    }
    if let Some(g) = links.gpus_per_nic {
        params.gpus_per_nic = g;
        given.push("GPUs per NIC from the command line".into());
    }
    params.validate()?;
    Ok((params, given))
}

fn calibrate(args: &CalibrateArgs) -> Result<ExitCode, Box<dyn Error>> {
    let mut params = default_params();
    let mut sources = Vec::new();
    let flags_give_net = args.links.net_alpha_us.is_some() || args.links.net_gbps.is_some();
    if let Some(path) = &args.nvlink_json {
        let fit = link_from_p2p(&path.display().to_string(), &read_json(path)?)?;
        params.nvlink = fit.link;
        sources.push(format!(
            "NVLink: {} (α {:.2} µs at {} B, β {:.1} GB/s at {} B)",
            path.display(),
            fit.alpha_us,
            fit.bytes.0,
            fit.gbps,
            fit.bytes.1
        ));
    } else if args.links.nvlink_alpha_us.is_none() && args.links.nvlink_gbps.is_none() {
        return Err("weft model calibrate: give --nvlink-json (a `weft bench p2p --channel memory --json` file) \
                    or --nvlink-alpha-us/--nvlink-gbps"
            .into());
    }
    if let Some(path) = &args.fifo_json {
        params.proxy_us = proxy_us_from_fifo(&path.display().to_string(), &read_json(path)?)?;
        sources.push(format!(
            "proxy: {} ({:.3} µs per message, a pop-only handler's floor)",
            path.display(),
            params.proxy_us
        ));
    }
    if let Some(path) = &args.net_json {
        let fit = link_from_p2p(&path.display().to_string(), &read_json(path)?)?;
        params.net = fit.link;
        // A PortChannel benchmark's lone put is what a step of weft's PortChannel algorithms pays.
        params.port_alpha_us = Some(fit.alpha_us);
        sources.push(format!(
            "network: {} (α {:.2} µs, β {:.1} GB/s; the PortChannel α)",
            path.display(),
            fit.alpha_us,
            fit.gbps
        ));
    } else if args.gin_json.is_some() {
        return Err("weft model calibrate: --gin-json replaces --net-json's α; give --net-json for β".into());
    } else if !flags_give_net {
        let env = weft_core::Env::from_process()?;
        let Some(net) = env.emulated_net else {
            return Err(
                "weft model calibrate: give --net-json (a `weft bench p2p --json` file measured across nodes), \
                        --net-alpha-us/--net-gbps, or the emulated NIC's WEFT_EMU_NET_LATENCY_US/WEFT_EMU_NET_GBPS"
                    .into(),
            );
        };
        params.net = net;
        sources.push(format!(
            "network: the emulated NIC (WEFT_EMU_NET_LATENCY_US={}, WEFT_EMU_NET_GBPS={})",
            alpha_us(&net),
            gbps(&net).map_or("unset".into(), |g| g.to_string())
        ));
    }
    if let Some(path) = &args.gin_json {
        let gin = read_json(path)?;
        let alpha = proxy_one_way_us_from_gin(&path.display().to_string(), &gin)?;
        params.net = weft_model::params::link("the network", alpha, gbps(&params.net))?;
        sources.push(format!("network α: {} (one-way put + signal through the proxy, {alpha:.2} µs)", path.display()));
        // A real put's cost to the proxy, which the FIFO benchmark's pop-only floor is not.
        params.proxy_us = proxy_us_from_gin_stream(&path.display().to_string(), &gin)?;
        sources.push(format!(
            "proxy: {} ({:.3} µs per put, the smallest message of a stream through the proxy)",
            path.display(),
            params.proxy_us
        ));
    }
    let (params, given) = apply(&args.links, params)?;
    sources.extend(given);
    let file = params.to_file(sources);
    std::fs::write(&args.out, serde_json::to_string_pretty(&file)? + "\n")
        .map_err(|e| format!("{}: {e}", args.out.display()))?;
    println!("{}", describe(&params));
    for s in &file.sources {
        println!("#   {s}");
    }
    println!("wrote {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}

/// One line naming every parameter.
fn describe(params: &Params) -> String {
    let link = |l: &LinkModel| match gbps(l) {
        Some(b) => format!("α {:.2} µs, β {b:.1} GB/s", alpha_us(l)),
        None => format!("α {:.2} µs, β uncapped", alpha_us(l)),
    };
    let port = params.port_alpha_us.map_or(String::new(), |a| format!(" (a PortChannel step: α {a:.2} µs)"));
    format!(
        "# NVLink {}; network {}{port} per NIC; proxy {:.3} µs per message; η {}; {} GPU(s) per NIC",
        link(&params.nvlink),
        link(&params.net),
        params.proxy_us,
        params.ll_factor,
        params.gpus_per_nic
    )
}

/// One size's predictions: per algorithm, the closed form and (with `--sim`) the simulation.
#[derive(Debug)]
struct Prediction {
    bytes: usize,
    closed: Vec<f64>,
    simulated: Vec<Option<f64>>,
}

fn predict(args: &PredictArgs) -> Result<ExitCode, Box<dyn Error>> {
    let shape = Shape::new(args.nodes, args.gpus_per_node)?;
    let algorithms = Algorithm::parse_list(&args.algo)?;
    let (min, max) = parse_size_range(&args.min_bytes, &args.max_bytes)?;
    let base = match &args.params {
        Some(path) => read_params_file(path)?.params()?,
        None => default_params(),
    };
    let (params, _) = apply(&args.links, base)?;
    let ratios = args
        .ratio
        .iter()
        .map(|r| -> Result<(usize, usize), Box<dyn Error>> {
            let pair = Algorithm::parse_list(r)?;
            let index = |a: Algorithm| algorithms.iter().position(|&b| b == a);
            match pair[..] {
                [a, b] => Ok((
                    index(a).ok_or(format!("--ratio: {} is not in --algo", a.name()))?,
                    index(b).ok_or(format!("--ratio: {} is not in --algo", b.name()))?,
                )),
                _ => Err("--ratio takes two algorithms, A,B".into()),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let predictions: Vec<Prediction> = sizes_between(min, max, args.factor)
        .into_iter()
        .map(|bytes| predict_size(&algorithms, shape, bytes, &params, args.sim))
        .collect();
    print_table(&algorithms, shape, &params, &predictions, &ratios, args.sim);
    if let Some(path) = &args.plot {
        plot(path, &algorithms, shape, &predictions, args.sim)?;
        println!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn predict_size(algorithms: &[Algorithm], shape: Shape, bytes: usize, params: &Params, simulate: bool) -> Prediction {
    let closed = algorithms.iter().map(|&a| closed_form::time_us(a, shape, bytes as f64, params)).collect();
    let simulated = algorithms
        .iter()
        .map(|&a| {
            // One element per byte: the schedule's pieces are byte ranges.
            simulate.then(|| sim::time_us(&Schedule::build(a, shape, bytes, params.ll_factor), params, 1.0))
        })
        .collect();
    Prediction { bytes, closed, simulated }
}

/// The fastest of `times` (ignoring missing ones), by name.
fn best(algorithms: &[Algorithm], times: impl Iterator<Item = Option<f64>>) -> &'static str {
    algorithms
        .iter()
        .zip(times)
        .filter_map(|(a, t)| t.map(|t| (a, t)))
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .map_or("-", |(a, _)| a.name())
}

fn print_table(
    algorithms: &[Algorithm],
    shape: Shape,
    params: &Params,
    predictions: &[Prediction],
    ratios: &[(usize, usize)],
    simulate: bool,
) {
    println!(
        "# weft model: AllReduce on {} node(s) x {} GPU(s), µs per call; closed forms{}",
        shape.nodes(),
        shape.gpus_per_node(),
        if simulate { ", then the simulator's (`sim`)" } else { "" }
    );
    println!("{}", describe(params));
    let mut header = format!("{:>8}", "size");
    for a in algorithms {
        header += &format!(" {:>10}", a.name());
        if simulate {
            header += &format!(" {:>10}", "sim");
        }
    }
    header += &format!(" {:>10}", "best");
    if simulate {
        header += &format!(" {:>10}", "best sim");
    }
    for &(a, b) in ratios {
        let name = format!("{}/{}", algorithms[b].name(), algorithms[a].name());
        header += &format!(" {name:>18}");
        if simulate {
            header += &format!(" {:>10}", "sim");
        }
    }
    println!("{header}");
    let cell = |t: Option<f64>| t.map_or(format!(" {:>10}", "-"), |t| format!(" {t:>10.2}"));
    for p in predictions {
        let mut line = format!("{:>8}", format_size(p.bytes as f64));
        for (closed, simulated) in p.closed.iter().zip(&p.simulated) {
            line += &cell(Some(*closed));
            if simulate {
                line += &cell(*simulated);
            }
        }
        line += &format!(" {:>10}", best(algorithms, p.closed.iter().map(|&t| Some(t))));
        if simulate {
            line += &format!(" {:>10}", best(algorithms, p.simulated.iter().copied()));
        }
        for &(a, b) in ratios {
            line += &format!(" {:>18.2}", p.closed[b] / p.closed[a]);
            if simulate {
                let sim_ratio = p.simulated[b].zip(p.simulated[a]).map(|(b, a)| b / a);
                line += &sim_ratio.map_or(format!(" {:>10}", "-"), |r| format!(" {r:>10.2}"));
            }
        }
        println!("{line}");
    }
    for a in algorithms {
        println!("# {:>9}: {}", a.name(), closed_form::formula(*a));
    }
}

fn plot(
    path: &Path,
    algorithms: &[Algorithm],
    shape: Shape,
    predictions: &[Prediction],
    simulate: bool,
) -> Result<(), String> {
    let series = |time: &dyn Fn(&Prediction, usize) -> Option<f64>| -> Vec<Series> {
        algorithms
            .iter()
            .enumerate()
            .map(|(i, a)| Series {
                name: a.name().into(),
                color: PALETTE[i % PALETTE.len()],
                points: predictions.iter().filter_map(|p| time(p, i).map(|t| (p.bytes as f64, t))).collect(),
                band: Vec::new(),
            })
            .filter(|s| !s.points.is_empty())
            .collect()
    };
    let panel = |caption: &str, series| Panel { caption: caption.into(), x: XAxis::Bytes, y_desc: "µs", series };
    let mut panels = vec![panel("closed form", series(&|p, i| Some(p.closed[i])))];
    if simulate {
        panels.push(panel("simulated", series(&|p, i| p.simulated[i])));
    }
    let title = format!("AllReduce model, {} nodes x {} GPUs", shape.nodes(), shape.gpus_per_node());
    write(path, &title, &panels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(algo: &str) -> PredictArgs {
        PredictArgs {
            nodes: 6,
            gpus_per_node: 4,
            algo: algo.into(),
            min_bytes: "128K".into(),
            max_bytes: "2M".into(),
            factor: 4,
            sim: true,
            ratio: vec!["nvrar,ring".into(), "2ph,ring".into()],
            params: None,
            links: LinkArgs::default(),
            plot: None,
        }
    }

    #[test]
    fn predictions_carry_the_closed_forms_and_the_simulation_and_plot() {
        let a = args("all");
        let algorithms = Algorithm::parse_list(&a.algo).unwrap();
        let shape = Shape::new(a.nodes, a.gpus_per_node).unwrap();
        let p = predict_size(&algorithms, shape, 1 << 20, &default_params(), true);
        for (i, algorithm) in algorithms.iter().enumerate() {
            assert_eq!(p.closed[i], closed_form::time_us(*algorithm, shape, (1 << 20) as f64, &default_params()));
            assert!(p.simulated[i].is_some(), "{}", algorithm.name());
        }
        let dir = std::env::temp_dir().join(format!("weft-model-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("model.svg");
        plot(&svg, &algorithms, shape, &[p], true).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("nvrar") && text.contains("simulated"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(predict(&args("ring,nvrar,2ph")).is_ok());
        assert!(predict(&args("ring")).is_err(), "--ratio names an algorithm not predicted");
    }

    #[test]
    fn the_default_nvlink_is_what_calibrate_fits_from_the_checked_in_run() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/perf/data/proxy-2xh200/p2p-memory.json");
        let fit = link_from_p2p(path, &read_json(Path::new(path)).unwrap()).unwrap();
        let default = default_params();
        assert!((fit.alpha_us - alpha_us(&default.nvlink)).abs() < 0.01, "{fit:?}");
        assert!((fit.gbps - gbps(&default.nvlink).unwrap()).abs() < 1.0, "{fit:?}");
    }

    /// The parameters of the 2×H100 run `docs/multinode.md` models: a PortChannel step pays the
    /// point-to-point benchmark's lone put, NVRAR GIN's one-way latency and its put stream's cost.
    #[test]
    fn calibrate_keeps_the_port_channel_alpha_apart_from_gin_s() {
        let run = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/perf/data/2xh100-2026-11-28-model/callN/");
        let out = std::env::temp_dir().join(format!("weft-model-calibrate-{}.json", std::process::id()));
        let args = CalibrateArgs {
            nvlink_json: Some(format!("{run}p2p-memory.json").into()),
            fifo_json: None,
            net_json: Some(format!("{run}p2p-port-emu.json").into()),
            gin_json: Some(format!("{run}gin.json").into()),
            links: LinkArgs::default(),
            out: out.clone(),
        };
        calibrate(&args).unwrap();
        let file = read_params_file(&out).unwrap();
        std::fs::remove_file(&out).unwrap();
        let near = |a: f64, b: f64| (a - b).abs() < 0.01;
        assert!(near(file.net_alpha_us, 15.07), "{file:?}");
        assert!(file.port_alpha_us.is_some_and(|a| near(a, 33.25)), "{file:?}");
        assert!(near(file.proxy_us, 5.82), "{file:?}");
        assert!(file.net_gbps.is_some_and(|g| (g - 50.3).abs() < 0.1), "{file:?}");
    }

    #[test]
    fn flags_override_the_parameters() {
        let links = LinkArgs { net_alpha_us: Some(5.0), eta: Some(1.5), ..LinkArgs::default() };
        let (params, given) = apply(&links, default_params()).unwrap();
        assert_eq!((alpha_us(&params.net), gbps(&params.net), params.ll_factor), (5.0, Some(50.0), 1.5));
        assert_eq!(given.len(), 2);
        assert!(apply(&LinkArgs { eta: Some(0.5), ..LinkArgs::default() }, default_params()).is_err());
        // `--net-gbps 0` is refused, not read as an uncapped network.
        let zero = apply(&LinkArgs { net_gbps: Some(0.0), ..LinkArgs::default() }, default_params());
        assert!(zero.unwrap_err().to_string().contains("network β"));
    }
}
