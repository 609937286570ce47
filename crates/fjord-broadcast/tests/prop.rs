//! Any title, any parameters: an error, or a plan no client underruns.

use fjord_broadcast::*;
use proptest::prelude::*;

/// Random packets (some at the same time), sync points, a duration past
/// the last packet.
fn title() -> impl Strategy<Value = (Vec<Packet>, Vec<u32>, u64)> {
    prop::collection::vec(
        (0u64..40_000_000, 1u32..3000, prop::bool::weighted(0.3)),
        1..160,
    )
    .prop_flat_map(|raw| {
        let mut pts = 0;
        let mut packets = Vec::new();
        let mut sync = Vec::new();
        for (i, (gap, bytes, is_sync)) in raw.into_iter().enumerate() {
            pts += gap;
            packets.push(Packet { pts_ns: pts, bytes });
            if is_sync {
                sync.push(i as u32);
            }
        }
        let last = pts;
        (
            Just(packets),
            Just(sync),
            (last + 1)..(last + 2_000_000_000),
        )
    })
}

fn scheme() -> impl Strategy<Value = Scheme> {
    prop_oneof![
        Just(Scheme::Staggered),
        (1.01f64..6.0).prop_map(|alpha| Scheme::Pyramid { alpha }),
        (0u32..60).prop_map(|width| Scheme::Skyscraper { width }),
        Just(Scheme::Harmonic),
        Just(Scheme::CautiousHarmonic),
    ]
}

fn check_plan(plan: &Plan, arrivals: &[u64]) {
    let st = simulate(plan, arrivals.iter().copied());
    assert_eq!(st.underruns, 0, "{:?}", plan.description());
    assert!(st.worst_wait_ns <= plan.worst_wait_ns());
    assert!(st.bandwidth_bytes_per_s > 0.0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn plans_never_underrun(
        (packets, sync, duration) in title(),
        scheme in scheme(),
        wait_share in 0.0f64..1.2,
        cap in 0usize..80,
        any_cut in prop::bool::ANY,
        arrivals in prop::collection::vec(0u64..20_000_000_000, 1..6),
    ) {
        let title = if any_cut {
            Title::without_sync(packets, duration)
        } else {
            Title::new(packets, sync, duration)
        };
        let Ok(title) = title else { return Ok(()) };
        let config = Config {
            scheme,
            max_wait_ns: (duration as f64 * wait_share) as u64,
            max_channels: cap,
        };
        let Ok(plan) = Plan::new(title, config) else { return Ok(()) };
        check_plan(&plan, &arrivals);
        let rebuilt = Plan::from_description(&plan.description()).unwrap();
        prop_assert_eq!(rebuilt.join(arrivals[0]), plan.join(arrivals[0]));
    }

    /// A description changed in transit is refused or still plays.
    #[test]
    fn tampered_descriptions_are_refused_or_play(
        (packets, sync, duration) in title(),
        scheme in scheme(),
        wait_share in 0.05f64..0.9,
        which in 0usize..64,
        field in 0usize..5,
        value in prop_oneof![0u64..1000, 0u64..5_000_000_000, Just(u64::MAX)],
    ) {
        let Ok(title) = Title::new(packets, sync, duration) else { return Ok(()) };
        let config = Config::new(scheme, (duration as f64 * wait_share) as u64);
        let Ok(plan) = Plan::new(title, config) else { return Ok(()) };
        let mut d = plan.description();
        let c = which % d.channels.len();
        let ch = &mut d.channels[c].channel;
        match field {
            0 => ch.phase_ns = value,
            1 => ch.period_ns = value,
            2 => ch.rate.bytes = value,
            3 => ch.rate.per_ns = value,
            _ => ch.slots[0].offset_ns = value,
        }
        // Let the derived figures follow, as a consistent forger would.
        if let Ok(p) = Plan::from_description(&d) {
            check_plan(&p, &[0, 1, 3_000_000_000]);
        }
    }
}
