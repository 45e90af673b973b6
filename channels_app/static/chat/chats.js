/* The member's chats from the chat page (U3, issue 26): search over titles and
 * content in the sidebar; rename, export (Markdown, JSON) and delete with Undo from
 * the header. Talks to channels_app/web/chats.py; every answer is drawn as text. */
(function () {
  "use strict";

  const data = JSON.parse(document.getElementById("chat-data").textContent);
  const UNDO_MS = 10000;

  function csrfToken() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  async function post(url, fields) {
    const body = new FormData();
    body.append("csrfmiddlewaretoken", csrfToken());
    for (const [key, value] of Object.entries(fields || {})) body.append(key, value);
    const response = await fetch(url, {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken() },
    });
    let answer = {};
    try {
      answer = await response.json();
    } catch (err) {
      answer = {};
    }
    if (!response.ok) {
      const message = answer.error && answer.error.message ? answer.error.message : `The server answered ${response.status}.`;
      throw new Error(message);
    }
    return answer;
  }

  /* ---------------------------------------------------------------- toasts */

  function toast(text, action) {
    const box = document.getElementById("toast");
    if (!box) return;
    box.replaceChildren();
    const message = document.createElement("span");
    message.textContent = text;
    box.append(message);
    if (action) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "link-button";
      button.id = "toast-action";
      button.textContent = action.label;
      button.addEventListener("click", () => {
        box.hidden = true;
        action.run();
      });
      box.append(button);
    }
    box.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => (box.hidden = true), action ? UNDO_MS : 5000);
  }

  /* ---------------------------------------------------------------- search */

  const searchInput = document.getElementById("chat-search");
  const results = document.getElementById("search-results");
  const list = document.querySelector(".session-list");
  let searchTimer = null;
  let searchSeq = 0;

  async function search(query) {
    const mine = ++searchSeq;
    if (!query) {
      results.hidden = true;
      results.replaceChildren();
      list.hidden = false;
      return;
    }
    try {
      const response = await fetch(`/chat/search.json?q=${encodeURIComponent(query)}`, { credentials: "same-origin" });
      const answer = await response.json();
      if (mine !== searchSeq) return; // a newer search overtook this one
      if (!response.ok) throw new Error(answer.error ? answer.error.message : `HTTP ${response.status}`);
      results.replaceChildren();
      for (const hit of answer.results) {
        const link = document.createElement("a");
        link.href = hit.url;
        link.className = "session-link search-hit";
        link.dataset.session = hit.id;
        const title = document.createElement("span");
        title.className = "session-title";
        title.textContent = hit.title;
        link.append(title);
        if (hit.snippet) {
          const snippet = document.createElement("span");
          snippet.className = "session-snippet";
          snippet.textContent = hit.snippet;
          link.append(snippet);
        }
        results.append(link);
      }
      if (!answer.results.length) {
        const none = document.createElement("p");
        none.className = "muted small-print";
        none.textContent = "No chat matches.";
        results.append(none);
      }
      results.hidden = false;
      list.hidden = true;
    } catch (err) {
      results.replaceChildren();
      const failed = document.createElement("p");
      failed.className = "note error";
      failed.textContent = `Search failed: ${err.message}`;
      results.append(failed);
      results.hidden = false;
    }
  }

  if (searchInput && results && list) {
    searchInput.addEventListener("input", () => {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(() => search(searchInput.value.trim()), 200);
    });
    searchInput.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        searchInput.value = "";
        search("");
      }
    });
  }

  /* ------------------------------------------------------- the open chat */

  if (!data.session) return;
  const session = data.session;
  const base = `/chat/s/${session.id}/`;

  const renameButton = document.getElementById("rename-chat");
  const deleteButton = document.getElementById("delete-chat");
  const titleNode = document.getElementById("chat-title");

  function setTitle(title) {
    titleNode.textContent = title;
    document.title = `${title} · Claw Platform`;
    const link = document.querySelector(`.session-list .session-link[data-session="${session.id}"] .session-title`);
    if (link) link.textContent = title;
  }

  if (renameButton) {
    renameButton.addEventListener("click", () => {
      const form = document.createElement("form");
      form.className = "rename-form";
      const input = document.createElement("input");
      input.id = "rename-input";
      input.maxLength = 200;
      input.value = titleNode.textContent;
      input.setAttribute("aria-label", "New name of the chat");
      const save = document.createElement("button");
      save.type = "submit";
      save.className = "small primary";
      save.textContent = "Save";
      const cancel = document.createElement("button");
      cancel.type = "button";
      cancel.className = "small";
      cancel.textContent = "Cancel";
      form.append(input, save, cancel);
      titleNode.hidden = true;
      titleNode.after(form);
      input.focus();
      input.select();
      const close = () => {
        form.remove();
        titleNode.hidden = false;
      };
      cancel.addEventListener("click", close);
      input.addEventListener("keydown", (event) => {
        if (event.key === "Escape") close();
      });
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        try {
          const answer = await post(`${base}rename/`, { title: input.value });
          setTitle(answer.title);
          close();
        } catch (err) {
          toast(`Could not rename the chat: ${err.message}`);
        }
      });
    });
  }

  if (deleteButton) {
    deleteButton.addEventListener("click", async () => {
      try {
        const answer = await post(`${base}delete/`);
        document.body.classList.add("chat-deleted");
        const link = document.querySelector(`.session-list .session-link[data-session="${session.id}"]`);
        if (link) link.hidden = true;
        toast("Chat deleted.", {
          label: "Undo",
          run: async () => {
            try {
              await post(answer.restore);
              document.body.classList.remove("chat-deleted");
              if (link) link.hidden = false;
              toast("Chat restored.");
            } catch (err) {
              toast(`Could not restore the chat: ${err.message}`);
            }
          },
        });
        setTimeout(() => {
          if (document.body.classList.contains("chat-deleted")) location.href = "/chat/";
        }, UNDO_MS);
      } catch (err) {
        toast(`Could not delete the chat: ${err.message}`);
      }
    });
  }

  window.ClawChats = { toast: toast, post: post };
})();
