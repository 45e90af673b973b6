// The usage report's chart (O2): cost per day, stacked by agent or model, drawn by
// Chart.js from the figures the page embeds (the same as its tables).
(function () {
  "use strict";
  const source = document.getElementById("usage-chart-data");
  const canvas = document.getElementById("usage-chart");
  if (!source || !canvas || typeof window.Chart === "undefined") return;
  const data = JSON.parse(source.textContent);
  const chart = new window.Chart(canvas, {
    type: "bar",
    data: data,
    options: {
      animation: false,
      responsive: true,
      scales: {
        x: { stacked: true },
        y: { stacked: true, title: { display: true, text: "USD" } },
      },
      plugins: { legend: { position: "bottom" } },
    },
  });
  canvas.dataset.series = String(chart.data.datasets.length);
  canvas.dataset.ready = "1";
})();
