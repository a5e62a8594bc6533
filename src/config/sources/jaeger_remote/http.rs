//! The one HTTP call: `GET endpoint?service=NAME` over HTTP or HTTPS (`ureq`), with a
//! whole-request time limit and a size limit on the answer.

use std::net::IpAddr;
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use ureq::tls::TlsConfig;

use super::tls;
use crate::config::error::{ConfigError, ConfigErrorKind};

/// The largest answer read: a strategy with a few thousand operations is well below.
pub(crate) const MAX_BODY_BYTES: u64 = 1 << 20;

/// What a query value keeps unescaped: RFC 3986's unreserved characters.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// An HTTP client bound to one URL.
pub(crate) struct Client {
    agent: ureq::Agent,
    url: String,
    timeout: Duration,
}

impl Client {
    /// The client for `endpoint` (an `http://` or `https://` URL with its path) asking
    /// for `service`, with `tls` for an `https://` one; `tls_files` says whether TLS
    /// files were given (they need `https://`).
    ///
    /// `Err` is the reason the endpoint is refused, for people.
    pub(crate) fn new(
        endpoint: &str,
        service: &str,
        timeout: Duration,
        (tls, tls_files): (TlsConfig, bool),
    ) -> Result<Self, String> {
        let uri = Self::check(endpoint, tls_files)?;
        let mut url = endpoint.to_owned();
        match uri.query() {
            None => url.push('?'),
            Some(q) if q.is_empty() || q.ends_with('&') => {}
            Some(_) => url.push('&'),
        }
        url.push_str("service=");
        url.extend(utf8_percent_encode(service, QUERY_VALUE));
        let config = ureq::Agent::config_builder()
            .proxy(proxy_for(
                uri.host().unwrap_or_default(),
                ureq::Proxy::try_from_env(),
            ))
            .timeout_global(Some(timeout))
            .tls_config(tls)
            .http_status_as_error(true)
            // A fresh connection per poll: a pooled one may have been closed by the
            // server or a proxy in the minute between polls, which would fail a poll.
            .max_idle_connections(0)
            .build();
        Ok(Self {
            agent: config.into(),
            url,
            timeout,
        })
    }

    /// The endpoint parsed, if it is an `http://` or `https://` URL with a host
    /// (`https://` if `tls_files`); `Err` is the reason it is refused, for people.
    pub(crate) fn check(endpoint: &str, tls_files: bool) -> Result<ureq::http::Uri, String> {
        let uri: ureq::http::Uri = endpoint
            .parse()
            .map_err(|e| format!("{endpoint:?} is not a URL ({e}); use http://host:port/path, such as http://jaeger-collector:14268/api/sampling"))?;
        match uri.scheme_str() {
            Some("https") => {}
            Some("http") if !tls_files => {}
            Some("http") => return Err(format!("{endpoint:?} is plain http:// but TLS files were given; use https:// (verification is always on)")),
            _ => return Err(format!("{endpoint:?} is not an http:// or https:// URL; use http://host:port/path, such as http://jaeger-collector:14268/api/sampling")),
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(format!("{endpoint:?} has no host"));
        }
        Ok(uri)
    }

    /// The URL asked, with its `service` query.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The answer's body.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] of kind [`Io`](ConfigErrorKind::Io) naming the URL: no
    /// connection, no whole answer within the time limit, a status other than 2xx, an
    /// answer over [`MAX_BODY_BYTES`]; of kind [`Tls`](ConfigErrorKind::Tls) for a
    /// failed TLS handshake (its cause named); of kind
    /// [`Syntax`](ConfigErrorKind::Syntax) for an answer that is not UTF-8.
    pub(crate) fn get(&self) -> Result<String, ConfigError> {
        let io = |what: String, e: ureq::Error| {
            let (kind, what) = match tls::describe(&e) {
                Some(tls) => (ConfigErrorKind::Tls, tls),
                None => (ConfigErrorKind::Io, what),
            };
            kind.error(&self.url, what).with_source(e)
        };
        let describe = |e: &ureq::Error| match e {
            ureq::Error::StatusCode(code) => format!("the endpoint answered HTTP status {code}"),
            ureq::Error::Timeout(_) => {
                format!(
                    "no whole answer within the time limit of {:?}",
                    self.timeout
                )
            }
            ureq::Error::BodyExceedsLimit(limit) => {
                format!("the answer is larger than the limit of {limit} bytes")
            }
            other => format!("cannot fetch the sampling strategy: {other}"),
        };
        let mut response = self
            .agent
            .get(&self.url)
            .call()
            .map_err(|e| io(describe(&e), e))?;
        let bytes = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
            .map_err(|e| io(describe(&e), e))?;
        String::from_utf8(bytes).map_err(|e| {
            ConfigErrorKind::Syntax
                .error(
                    &self.url,
                    "the answer is not UTF-8 text; expected Jaeger's JSON",
                )
                .with_source(e)
        })
    }
}

/// The environment's proxy (`HTTP_PROXY`, `NO_PROXY`), except for a loopback `host`
/// (an agent beside the process), as Go's clients do.
fn proxy_for(host: &str, from_env: Option<ureq::Proxy>) -> Option<ureq::Proxy> {
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        None
    } else {
        from_env
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn url(endpoint: &str, service: &str) -> Result<String, String> {
        let tls = tls::config(&crate::tls_files::TlsFiles::default()).unwrap();
        Client::new(endpoint, service, Duration::from_secs(1), (tls, false)).map(|c| c.url)
    }

    #[test]
    fn the_service_is_added_to_the_query_escaped() {
        assert_eq!(
            url("http://collector:14268/api/sampling", "checkout").unwrap(),
            "http://collector:14268/api/sampling?service=checkout"
        );
        assert_eq!(
            url("http://127.0.0.1:5778/sampling?x=1", "my svc/ä&").unwrap(),
            "http://127.0.0.1:5778/sampling?x=1&service=my%20svc%2F%C3%A4%26"
        );
        assert_eq!(
            url("http://agent:5778/sampling?", "a-b.c_d~").unwrap(),
            "http://agent:5778/sampling?service=a-b.c_d~"
        );
    }

    #[test]
    fn loopback_endpoints_bypass_the_environments_proxy() {
        let proxy = || Some(ureq::Proxy::new("http://proxy.invalid:3128").unwrap());
        for host in ["localhost", "LocalHost", "127.0.0.1", "127.8.9.10", "[::1]"] {
            assert!(proxy_for(host, proxy()).is_none(), "{host}");
        }
        for host in ["jaeger-collector", "10.0.0.7", "[2001:db8::1]"] {
            assert!(proxy_for(host, proxy()).is_some(), "{host}");
        }
        assert!(proxy_for("jaeger-collector", None).is_none());
    }

    #[test]
    fn only_http_and_https_urls_are_accepted() {
        assert!(url("https://collector/api/sampling", "svc").is_ok());
        for bad in ["collector:14268", "ftp://x/", "http://", "not a url"] {
            assert!(url(bad, "svc").is_err(), "{bad}");
        }
    }
}
