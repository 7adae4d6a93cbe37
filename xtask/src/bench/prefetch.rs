//! `cargo xtask bench prefetch`: page load time in headless Chromium with the
//! prefetch queue off against on, cold caches, over an emulated WAN between
//! the gateway and the origin (80 ms round trip by default).
//!
//! Each load starts from nothing: the gateway is restarted on an empty cache
//! file with `prefetch.enabled_for_origins` set for the cell, and Chromium
//! runs with a fresh profile. The cells alternate (off, on, on, off, ...) so
//! that drift on a noisy machine hits both.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use testbed::{
    Binaries, Browser, Demo, DemoOptions, DemoWan, GatewayConfigOverrides, LinkParams, WanParams,
};

use crate::cmd::workspace_root;

/// Namespace prefix of this benchmark.
const PREFIX: &str = "gwpf-";
/// Loads per cell.
const LOADS: usize = 5;
/// The page.
const URL: &str = "http://203.0.113.10/";

/// Options for `cargo xtask bench prefetch`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PrefetchBench {
    /// Round-trip time of the emulated link, in ms.
    pub rtt_ms: u64,
}

/// One page load.
#[derive(Debug, Clone, Copy)]
struct Load {
    prefetch: bool,
    response_start: f64,
    dom_content_loaded: f64,
    load_event_end: f64,
    requests: usize,
}

pub(crate) fn run(options: PrefetchBench) -> Result<()> {
    let built = crate::run::build(&["gateway", "origin", "wanem"])?;
    let binaries = Binaries {
        gateway: built[0].clone(),
        origin: built[1].clone(),
    };
    let dir = testbed::target_dir().join("bench-prefetch");
    let _ = std::fs::remove_dir_all(&dir);
    testbed::cleanup_stale(PREFIX)?;
    let one_way = Duration::from_millis(options.rtt_ms / 2);
    let mut demo_options = DemoOptions::new(PREFIX, &workspace_root(), &dir);
    demo_options.wan = Some(DemoWan {
        wanem: built[2].clone(),
        params: WanParams::symmetric(LinkParams::delay(one_way)),
    });
    println!(
        "==> starting the demo with a {} ms round trip between gateway and origin",
        options.rtt_ms
    );
    let mut demo = Demo::start(binaries, demo_options)?;
    let cache_path = dir.join("cache.redb");

    let mut loads = Vec::new();
    for round in 0..LOADS {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for prefetch in order {
            restart_gateway(&mut demo, &cache_path, prefetch)?;
            let load = load_page(&demo, prefetch)?;
            println!(
                "    round {}/{LOADS}, prefetch {}: load event at {:.0} ms ({} requests)",
                round + 1,
                if prefetch { "on " } else { "off" },
                load.load_event_end,
                load.requests
            );
            loads.push(load);
        }
    }
    if let Some(gateway) = demo.gateway.as_mut() {
        let _ = gateway.stop(Duration::from_secs(10));
    }
    let report = report(&loads, options.rtt_ms)?;
    let path = workspace_root().join("bench/results/prefetch.md");
    std::fs::write(&path, &report).with_context(|| format!("writing {}", path.display()))?;
    println!("{report}");
    println!("==> report written to bench/results/prefetch.md");
    Ok(())
}

/// Stops the gateway, empties its cache and starts it with prefetch on or off.
fn restart_gateway(demo: &mut Demo, cache_path: &std::path::Path, prefetch: bool) -> Result<()> {
    if let Some(mut gateway) = demo.gateway.take() {
        gateway.stop(Duration::from_secs(10))?;
    }
    let _ = std::fs::remove_file(cache_path);
    demo.restart_gateway(GatewayConfigOverrides {
        cache_path: Some(cache_path.to_owned()),
        prefetch_enabled: Some(prefetch),
        ..GatewayConfigOverrides::default()
    })?;
    Ok(())
}

fn load_page(demo: &Demo, prefetch: bool) -> Result<Load> {
    let mut browser = Browser::launch_in(demo.topology.client.name())?;
    let mut page = browser.new_page()?;
    let load = page.load(URL, Duration::from_secs(60))?;
    if !load.failures().is_empty() {
        bail!("failed requests: {:#?}", load.failures());
    }
    Ok(Load {
        prefetch,
        response_start: load.timing.response_start,
        dom_content_loaded: load.timing.dom_content_loaded_event_end,
        load_event_end: load.timing.load_event_end,
        requests: load.requests.len(),
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn report(loads: &[Load], rtt_ms: u64) -> Result<String> {
    let mut r = super::common::report_header(
        "Prefetch benchmark: page load with the prefetch queue off and on",
        "prefetch",
    )?;
    writeln!(
        r,
        "- link: wanem between the gateway and the origin host, {rtt_ms} ms round trip, no loss, no rate limit; LAN (browser to gateway) unemulated"
    )?;
    writeln!(
        r,
        "- page: the demo site ({URL}); each load: the gateway restarted on an empty cache, Chromium with a fresh profile; {LOADS} loads per cell, cells alternating"
    )?;
    writeln!(
        r,
        "- figures: navigation timing, ms since navigation start\n"
    )?;
    writeln!(
        r,
        "| load | prefetch | responseStart | DOMContentLoaded end | loadEventEnd | requests |"
    )?;
    writeln!(r, "|---|---|---|---|---|---|")?;
    for (i, l) in loads.iter().enumerate() {
        writeln!(
            r,
            "| {} | {} | {:.0} | {:.0} | {:.0} | {} |",
            i + 1,
            if l.prefetch { "on" } else { "off" },
            l.response_start,
            l.dom_content_loaded,
            l.load_event_end,
            l.requests
        )?;
    }
    let pick = |prefetch: bool, f: fn(&Load) -> f64| {
        median(
            loads
                .iter()
                .filter(|l| l.prefetch == prefetch)
                .map(f)
                .collect(),
        )
    };
    let (off, on) = (
        pick(false, |l| l.load_event_end),
        pick(true, |l| l.load_event_end),
    );
    let (off_dcl, on_dcl) = (
        pick(false, |l| l.dom_content_loaded),
        pick(true, |l| l.dom_content_loaded),
    );
    writeln!(
        r,
        "\n| median | prefetch off | prefetch on | ratio (on / off) | target |"
    )?;
    writeln!(r, "|---|---|---|---|---|")?;
    writeln!(
        r,
        "| loadEventEnd, ms | {off:.0} | {on:.0} | {:.2} | ≤ 0.7 |",
        on / off
    )?;
    writeln!(
        r,
        "| DOMContentLoaded end, ms | {off_dcl:.0} | {on_dcl:.0} | {:.2} | |",
        on_dcl / off_dcl
    )?;
    Ok(r)
}
