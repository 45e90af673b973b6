/* Light or dark (U3): the system's setting unless the reader chose one with the
 * header's toggle (kept in this browser's localStorage). Loaded in <head>, before
 * the page paints, so a dark page never flashes white. */
(function () {
  "use strict";

  const KEY = "claw-theme";
  const CHOICES = ["system", "dark", "light"];
  const LABELS = { system: "Theme: system", dark: "Theme: dark", light: "Theme: light" };

  function stored() {
    try {
      const value = localStorage.getItem(KEY);
      return CHOICES.includes(value) ? value : "system";
    } catch (err) {
      return "system";
    }
  }

  function apply(choice) {
    const root = document.documentElement;
    if (choice === "system") delete root.dataset.theme;
    else root.dataset.theme = choice;
    root.dataset.themeChoice = choice;
  }

  function save(choice) {
    try {
      if (choice === "system") localStorage.removeItem(KEY);
      else localStorage.setItem(KEY, choice);
    } catch (err) {
      // private mode: the choice lasts for this page only
    }
  }

  apply(stored());

  document.addEventListener("DOMContentLoaded", function () {
    const toggle = document.getElementById("theme-toggle");
    if (!toggle) return;
    const label = () => {
      const choice = stored();
      toggle.textContent = choice === "dark" ? "☾" : choice === "light" ? "☀" : "◐";
      toggle.title = LABELS[choice] + " (click to change)";
      toggle.setAttribute("aria-label", LABELS[choice]);
    };
    label();
    toggle.addEventListener("click", function () {
      const next = CHOICES[(CHOICES.indexOf(stored()) + 1) % CHOICES.length];
      save(next);
      apply(next);
      label();
    });
  });
})();
