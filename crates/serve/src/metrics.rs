//! `GET /metrics`: what the service did, in the Prometheus / OpenMetrics text format
//! (`prometheus-client`, the Prometheus project's own Rust library).
//!
//! - `situate_http_requests_total{route, method, status}`: requests answered, by the
//!   matched route's pattern (`/v1/cards/{*chunk_id}`, never the chunk id itself, so the
//!   label set stays small), `unmatched` for no route;
//! - `situate_http_request_duration_seconds{route, method}`: how long they took;
//! - `situate_jobs{state}`: jobs remembered, by state;
//! - `situate_index_documents`, `situate_index_chunks`, `situate_index_vectors`,
//!   `situate_index_disk_bytes`: the index's size, read when scraped.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Request {
    route: String,
    method: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Route {
    route: String,
    method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabel {
    state: String,
}

type Latency = Family<Route, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 0.25 ms to ~8 s.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

/// The service's metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<Request, Counter>,
    latency: Latency,
    jobs: Family<JobLabel, Gauge>,
    documents: Gauge,
    chunks: Gauge,
    vectors: Gauge,
    disk_bytes: Gauge,
}

/// The index's size at a scrape.
pub struct IndexSize {
    /// Documents.
    pub documents: u64,
    /// Chunk cards.
    pub chunks: u64,
    /// Vectors in the vector index.
    pub vectors: u64,
    /// Bytes on disk.
    pub disk_bytes: u64,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<Request, Counter>::default();
        registry.register(
            "situate_http_requests",
            "HTTP requests answered, by route pattern, method and status",
            requests.clone(),
        );
        let latency: Latency = Family::new_with_constructor(latency_histogram);
        registry.register(
            "situate_http_request_duration_seconds",
            "Time to answer an HTTP request, by route pattern and method",
            latency.clone(),
        );
        let jobs = Family::<JobLabel, Gauge>::default();
        registry.register("situate_jobs", "Jobs remembered, by state", jobs.clone());
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            g
        };
        let documents = gauge(
            &mut registry,
            "situate_index_documents",
            "Documents in the index",
        );
        let chunks = gauge(
            &mut registry,
            "situate_index_chunks",
            "Chunk cards in the index",
        );
        let vectors = gauge(
            &mut registry,
            "situate_index_vectors",
            "Vectors in the vector index",
        );
        let disk_bytes = gauge(
            &mut registry,
            "situate_index_disk_bytes",
            "Bytes the index directory takes on disk",
        );
        Metrics {
            registry,
            requests,
            latency,
            jobs,
            documents,
            chunks,
            vectors,
            disk_bytes,
        }
    }
}

impl Metrics {
    /// Records one answered request.
    pub fn observe(&self, route: &str, method: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&Request {
                route: route.to_string(),
                method: method.to_string(),
                status,
            })
            .inc();
        self.latency
            .get_or_create(&Route {
                route: route.to_string(),
                method: method.to_string(),
            })
            .observe(seconds);
    }

    /// The text of a scrape, with the job counts and the index size as they are now.
    pub fn render(&self, jobs: &[(&'static str, u64)], size: Option<IndexSize>) -> String {
        for (state, n) in jobs {
            self.jobs
                .get_or_create(&JobLabel {
                    state: state.to_string(),
                })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        if let Some(s) = size {
            let set = |g: &Gauge, v: u64| g.set(i64::try_from(v).unwrap_or(i64::MAX));
            set(&self.documents, s.documents);
            set(&self.chunks, s.chunks);
            set(&self.vectors, s.vectors);
            set(&self.disk_bytes, s.disk_bytes);
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_counts_requests_by_route_and_reports_sizes() {
        let m = Metrics::default();
        m.observe("/v1/search", "POST", 200, 0.004);
        m.observe("/v1/search", "POST", 200, 0.002);
        m.observe("/v1/cards/{*chunk_id}", "GET", 404, 0.001);
        let text = m.render(
            &[("running", 1), ("succeeded", 3)],
            Some(IndexSize {
                documents: 5,
                chunks: 40,
                vectors: 40,
                disk_bytes: 1234,
            }),
        );
        assert!(
            text.contains(
                r#"situate_http_requests_total{route="/v1/search",method="POST",status="200"} 2"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"status="404"} 1"#), "{text}");
        assert!(text.contains(
            r#"situate_http_request_duration_seconds_count{route="/v1/search",method="POST"} 2"#
        ));
        assert!(
            text.contains(r#"situate_jobs{state="succeeded"} 3"#),
            "{text}"
        );
        assert!(text.contains("situate_index_chunks 40"), "{text}");
        assert!(text.trim_end().ends_with("# EOF"));
    }
}
