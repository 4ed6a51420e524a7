// Package dashboard draws the chart's Grafana dashboard
// (charts/ssdcache/dashboards/ssdcache.json) from recorded scrapes of the
// node plugin's /metrics, where no Grafana and no Prometheus server run: in
// the VM of make bench, in a bench report, in a review.
//
// Recorder appends stamped scrapes to a log; Load puts a log into a
// Prometheus TSDB; Evaluate runs every panel's queries as range queries with
// Prometheus's own PromQL engine, Grafana's variables filled in as Grafana
// fills them; Draw lays the panels out on their grid, one picture. A query
// that fails or returns nothing is shown as such, not hidden.
package dashboard
