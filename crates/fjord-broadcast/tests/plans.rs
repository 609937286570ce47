//! Every scheme on synthetic titles: zero underruns, bandwidth and wait
//! against the closed forms, the cursors' and the joins' invariants.

mod common;

use common::*;
use fjord_broadcast::*;

fn plan(title: &Title, scheme: Scheme, wait_s: u64) -> Plan {
    Plan::new(title.clone(), Config::new(scheme, wait_s * S)).unwrap()
}

fn expected(plan: &Plan) -> Expected {
    let t = plan.title();
    formula(plan.config(), t.duration_ns(), t.bytes_per_s()).unwrap()
}

fn deviation(measured: f64, formula: f64) -> f64 {
    (measured / formula - 1.0).abs()
}

/// Arrivals 1 ns after each of the first instances of segment 1: the
/// longest waits there are.
fn worst_arrivals(plan: &Plan, count: usize) -> Vec<u64> {
    let first = plan.segments()[0].first_packet;
    (0..plan.channels().len())
        .filter(|&c| plan.channels()[c].slots.iter().any(|s| s.segment == 0))
        .flat_map(|c| {
            plan.emissions(c)
                .filter(move |e| e.packet == first)
                .take(count)
                .map(|e| e.due_ns + 1)
        })
        .collect()
}

/// INSTANCE's title (180 s at 3.5 Mbit/s, key frames every second, 5 s
/// wait): no underrun, and measured bandwidth and worst wait within 2 %
/// of the closed form for every scheme.
#[test]
fn every_scheme_meets_its_formula_on_the_instance_title() {
    let title = cbr(180, INSTANCE_RATE, S);
    for scheme in Scheme::ALL {
        let plan = plan(&title, scheme, 5);
        let f = expected(&plan);
        let mut arrivals: Vec<u64> = arrivals(40, 800 * S).collect();
        arrivals.extend(worst_arrivals(&plan, 3));
        let st = simulate(&plan, arrivals);
        let name = scheme.name();
        assert_eq!(st.underruns, 0, "{name}");
        assert_eq!(plan.channels().len(), f.channels, "{name}");
        let db = deviation(st.bandwidth_bytes_per_s, f.bandwidth_bytes_per_s);
        assert!(db < 0.02, "{name}: bandwidth off by {:.2} %", db * 100.0);
        // The plan's exact bandwidth and the cursors' count agree.
        assert!(deviation(st.bandwidth_bytes_per_s, plan.bandwidth_bytes_per_s()) < 1e-3);
        let dw = deviation(plan.worst_wait_ns() as f64, f.worst_wait_ns);
        assert!(dw < 0.02, "{name}: worst wait off by {:.2} %", dw * 100.0);
        // The adversarial arrivals reach the plan's bound, never pass it.
        assert!(st.worst_wait_ns <= plan.worst_wait_ns(), "{name}");
        assert!(st.worst_wait_ns + 2 >= plan.worst_wait_ns(), "{name}");
        assert!(st.worst_buffer_bytes < title.total_bytes(), "{name}");
    }
}

/// Cut anywhere (no sync constraint) the plans are the closed forms to
/// within rounding.
#[test]
fn without_sync_constraints_plans_are_the_formula() {
    let (packets, _) = cbr_parts(180, INSTANCE_RATE, S);
    let title = Title::without_sync(packets, 180 * S).unwrap();
    for scheme in Scheme::ALL {
        let plan = plan(&title, scheme, 5);
        let f = expected(&plan);
        let (b, _) = measure_bandwidth(&plan);
        let name = scheme.name();
        assert!(
            deviation(b, f.bandwidth_bytes_per_s) < 0.005,
            "{name}: {b} vs {f:?}"
        );
        assert!(
            deviation(plan.worst_wait_ns() as f64, f.worst_wait_ns) < 0.005,
            "{name}"
        );
        assert_eq!(
            simulate(&plan, arrivals(10, 400 * S)).underruns,
            0,
            "{name}"
        );
    }
}

/// The INSTANCE figure, through a plan rather than the formula alone.
#[test]
fn cautious_harmonic_plan_sends_instances_16_26_mbit() {
    let title = cbr(180, INSTANCE_RATE, S / 2);
    let plan = plan(&title, Scheme::CautiousHarmonic, 5);
    let mbit = measure_bandwidth(&plan).0 * 8.0 / 1e6;
    assert!((mbit - 16.26).abs() / 16.26 < 0.02, "{mbit}");
    assert_eq!(plan.channels().len(), 35);
}

#[test]
fn cursors_send_in_order_and_repeat_every_period() {
    let title = cbr(60, INSTANCE_RATE, S);
    for scheme in Scheme::ALL {
        let plan = plan(&title, scheme, 4);
        for (c, ch) in plan.channels().iter().enumerate() {
            let cycle: u64 = ch
                .slots
                .iter()
                .map(|s| u64::from(plan.segments()[s.segment as usize].packet_count))
                .sum();
            let two: Vec<Emission> = plan.emissions(c).take(2 * cycle as usize).collect();
            assert!(two.windows(2).all(|w| w[0].due_ns <= w[1].due_ns));
            let (a, b) = two.split_at(cycle as usize);
            for (x, y) in a.iter().zip(b) {
                assert_eq!((x.packet, x.due_ns + ch.period_ns), (y.packet, y.due_ns));
            }
            // Starting anywhere gives the same sequence from there.
            let t = a[cycle as usize / 3].due_ns + 1;
            let from: Vec<Emission> = plan.emissions_from(c, t).take(50).collect();
            let expect: Vec<Emission> = two
                .iter()
                .copied()
                .filter(|e| e.due_ns >= t)
                .take(50)
                .collect();
            assert_eq!(from, expect, "{} channel {c}", scheme.name());
        }
        assert_eq!(plan.emissions(plan.channels().len()).next(), None);
    }
}

#[test]
fn joins_hear_each_channel_once_and_leave_it_early() {
    let title = cbr(120, INSTANCE_RATE, S);
    for scheme in Scheme::ALL {
        let plan = plan(&title, scheme, 5);
        for a in [0, 7 * S + 3, 1_000 * S + 12_345] {
            let j = plan.join(a);
            assert!(j.start_ns >= a && j.wait_ns() <= plan.worst_wait_ns());
            assert!(j.listens.windows(2).all(|w| w[0].channel < w[1].channel));
            for l in &j.listens {
                let ch = &plan.channels()[l.channel];
                assert!(l.listen.start >= a, "{}", scheme.name());
                // One period at most, and over before the title ends.
                assert!(l.listen.end - l.listen.start <= ch.period_ns);
                assert!(l.listen.end <= j.start_ns + title.duration_ns());
            }
        }
    }
    // A staggered client hears one channel.
    assert_eq!(
        plan(&title, Scheme::Staggered, 5)
            .join(S)
            .max_channels_at_once(),
        1
    );
}

#[test]
fn description_round_trips_through_json() {
    let title = cbr(60, INSTANCE_RATE, S);
    for scheme in Scheme::ALL {
        let plan = plan(&title, scheme, 3);
        let json = serde_json::to_string(&plan.description()).unwrap();
        let parsed: Description = serde_json::from_str(&json).unwrap();
        let rebuilt = Plan::from_description(&parsed).unwrap();
        assert_eq!(rebuilt.segments(), plan.segments());
        assert_eq!(rebuilt.channels(), plan.channels());
        assert_eq!(rebuilt.worst_wait_ns(), plan.worst_wait_ns());
        assert_eq!(rebuilt.description(), plan.description());
        for a in [0, 5 * S + 1, 77 * S] {
            assert_eq!(rebuilt.join(a), plan.join(a));
        }
        let c = plan.channels().len() - 1;
        let first: Vec<Emission> = plan.emissions_from(c, 10 * S).take(20).collect();
        assert_eq!(
            rebuilt
                .emissions_from(c, 10 * S)
                .take(20)
                .collect::<Vec<_>>(),
            first
        );
    }
}

#[test]
fn tampered_descriptions_are_refused() {
    let title = cbr(30, INSTANCE_RATE, S);
    let good = plan(&title, Scheme::Skyscraper { width: 52 }, 3).description();
    let refuse = |d: &Description| assert!(Plan::from_description(d).is_err(), "{d:?}");
    let mut d = good.clone();
    d.version = 2;
    refuse(&d);
    let mut d = good.clone();
    d.segments[1].bytes += 1;
    refuse(&d);
    let mut d = good.clone();
    d.channels[0].channel.rate.bytes /= 2; // segment 1 no longer fits
    refuse(&d);
    let mut d = good.clone();
    d.channels[1].channel.slots[0].segment = 99;
    refuse(&d);
    let mut d = good.clone();
    d.channels.pop(); // the last segment is on no channel
    refuse(&d);
    let mut d = good.clone();
    d.worst_wait_ns -= 1;
    refuse(&d);
    let mut d = good.clone();
    d.packets[3][0] = u64::MAX;
    refuse(&d);
    let mut d = good;
    d.channels[0].channel.period_ns = 0;
    refuse(&d);
}

#[test]
fn sparse_sync_points_and_short_waits_are_errors() {
    // Key frames every 10 s cannot make harmonic's 1 s segments.
    let title = cbr(60, INSTANCE_RATE, 10 * S);
    assert!(matches!(
        Plan::new(title.clone(), Config::new(Scheme::Harmonic, S)),
        Err(PlanError::SyncTooSparse { .. })
    ));
    // 0.5 s of a 60 s title is 120 staggered channels: above the cap.
    assert!(matches!(
        Plan::new(title.clone(), Config::new(Scheme::Staggered, S / 2)),
        Err(PlanError::TooManyChannels { cap: 64, .. })
    ));
    assert!(matches!(
        Plan::new(title, Config::new(Scheme::Harmonic, 60 * S)),
        Err(PlanError::BadMaxWait { .. })
    ));
}
