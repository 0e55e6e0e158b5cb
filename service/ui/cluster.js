// The cluster: workers, their memory, GPUs and spilled bytes.

import { api } from "./api.js";
import { POLL_MS, dashboardLinks, facts, fmtBytes, fmtInt, h, memoryBar, num, section, show, showError, table } from "./dom.js";


export function clusterView() {
  async function refresh() {
    try {
      const c = await api("/cluster");
      const gpus = c.workers.some((w) => w.gpu);
      const headers = ["Worker", "Threads", "Executing", "Host memory", "Spilled to disk"].concat(gpus ? ["GPU", "Device memory", "Spilled to host"] : []);
      const workers = [...c.workers].sort((a, b) => a.name.localeCompare(b.name, "en", { numeric: true })); // stable order between refreshes
      const rows = workers.map((w) => {
        const cells = [h("span", { title: w.address }, w.name), num(w.threads), num(w.tasks_processing),
          h("td", { class: "progress" }, memoryBar(`host memory of ${w.name}`, w.memory_used, w.memory_limit)), num(fmtBytes(w.spilled_to_disk_bytes))];
        if (gpus) {
          const g = w.gpu || {};
          const limit = g.device_memory_limit || g.memory_total;
          const extra = g.device_memory_limit && g.memory_total ? ` limit (${fmtBytes(g.memory_total)} total)` : "";
          const gpuName = g.name ? `${g.name}${g.index !== null && g.index !== undefined ? ` #${g.index}` : ""}` : "—";
          cells.push(h("td", { class: "nowrap" }, gpuName),
            h("td", { class: "progress" }, memoryBar(`device memory of ${w.name}`, g.memory_used, limit, extra)), num(fmtBytes(g.spilled_to_host_bytes)));
        }
        return cells;
      });
      const used = c.workers.reduce((a, w) => a + w.memory_used, 0);
      show(
        h("div", { class: "toolbar" }, h("h1", {}, "Cluster"), h("span", { class: "muted" }, `refreshed ${new Date().toLocaleTimeString()}`)),
        dashboardLinks(c.dashboard_link),
        section("Summary", facts([["Backend", h("strong", { id: "cluster-backend" }, c.backend)], ["Kind", c.kind], ["Protocol", h("span", { id: "cluster-protocol" }, c.protocol)],
          ["Scheduler", h("code", {}, c.scheduler_address)], ["Workers", fmtInt(c.workers.length)], ["Threads", fmtInt(c.total_threads)],
          ["Host memory", memoryBar("host memory of the cluster", used, c.total_memory_limit)]])),
        section("Workers", table(headers, rows, { id: "workers" }), gpus ? null : h("p", { class: "muted" }, "No GPUs: jobs run on the CPU with pandas.")));
      showError("");
    } catch (err) {
      showError(`Could not load the cluster: ${err.message}`);
    }
  }
  refresh();
  const timer = setInterval(() => { if (!document.hidden) refresh(); }, POLL_MS);
  return () => clearInterval(timer);
}
