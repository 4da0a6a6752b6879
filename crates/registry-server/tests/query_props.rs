//! Property tests: the query parser, the path splitter and the whole dispatcher never panic,
//! whatever bytes a request carries, and their bounds hold.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::Request;
use proptest::prelude::*;
use servebench_registry_server::http::query::{Params, MAX_LIMIT, MAX_PARAMS};
use servebench_registry_server::{load, router, AppState};
use tower::ServiceExt as _;

fn state() -> Arc<AppState> {
    static S: OnceLock<Arc<AppState>> = OnceLock::new();
    S.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/registry");
        AppState::new(load(&dir).unwrap(), "localhost")
    })
    .clone()
}

fn query_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(
            (
                prop_oneof![
                    Just("q".to_string()),
                    Just("limit".to_string()),
                    Just("offset".to_string()),
                    Just("chat".to_string()),
                    Just("min_vram_gb".to_string()),
                    Just("sort_by".to_string()),
                    "[a-z_%0-9]{0,12}",
                ],
                prop_oneof![
                    "[-+0-9.eE]{0,12}",
                    "(NaN|inf|-inf|1e400|true|false|unknown|%ff|%00|%)",
                    any::<String>(),
                ],
            ),
            0..40,
        )
        .prop_map(|pairs| pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn params_parse_is_total_and_bounded(raw in query_strategy()) {
        if let Ok(p) = Params::parse(Some(&raw)) {
            prop_assert!(p.pairs().len() <= MAX_PARAMS);
            let page = p.page();
            prop_assert!((1..=MAX_LIMIT).contains(&page.limit));
            let _ = p.terms("q");
            let _ = p.tri("chat");
            let _ = p.boolean("evidence");
            let _ = p.number("min_vram_gb").map(|x| assert!(x.is_finite()));
            let _ = p.with_page(page);
        }
    }

    #[test]
    fn dispatcher_never_panics(
        seg in prop_oneof![
            Just("api/v1/recipes".to_string()),
            Just("api/v1/speed-sweeps".to_string()),
            Just("api/v1/models".to_string()),
            Just("".to_string()),
            Just("compare".to_string()),
            "[a-zA-Z0-9%./_-]{0,60}",
        ],
        raw in query_strategy(),
    ) {
        let uri = format!("/{seg}?{}", raw.replace(['#', ' '], "%20"));
        let Ok(req) = Request::get(&uri).body(Body::empty()) else {
            return Ok(());
        };
        // Timers on: page requests wait for a rendering slot with a timeout, as in the server.
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let r = rt.block_on(router(state()).oneshot(req)).unwrap();
        prop_assert!(r.status().as_u16() < 500, "{uri} -> {}", r.status());
    }
}
