/* The chat page: one session's transcript, kept live over its WebSocket (U1-U3).
 *
 * Model: a turn per user message, each a list of items (text, thinking, tool card,
 * note) built from the database state the page (or a socket snapshot) carries, then
 * changed by live events. Every event is applied idempotently: tool cards by call
 * id, text batches by their offset in the stream, terminal events by run. So a
 * replay after a reconnect, a second tab, or a snapshot racing live events never
 * shows anything twice, and a batch that passed us by is noticed (a gap) and filled
 * from a newer snapshot.
 */
(function () {
  "use strict";

  const data = JSON.parse(document.getElementById("chat-data").textContent);
  const render = window.ClawRender;
  const UNFINISHED = new Set(["queued", "running", "awaiting_approval"]);
  const HISTORY_COMMANDS = new Set(["new", "clear", "skills", "agent", "undo", "redo", "compact", "summarize", "thread", "resume"]);
  const RESYNC_AFTER_MS = 1200;
  // A running run we have heard nothing of for this long is read again from the
  // server: a relayed frame can be lost (the layer dropped it), and if it was the
  // end of the run, nothing else would ever tell this tab.
  const QUIET_RESYNC_MS = 8000;

  const sidebar = document.getElementById("sidebar");
  for (const [id, open] of [["open-sidebar", true], ["close-sidebar", false]]) {
    const button = document.getElementById(id);
    if (button) button.addEventListener("click", () => sidebar.classList.toggle("open", open));
  }
  const teamSelect = document.getElementById("team-select");
  if (teamSelect) teamSelect.addEventListener("change", () => document.getElementById("team-form").submit());

  if (!data.session) return;

  const el = {
    transcript: document.getElementById("transcript"),
    composer: document.getElementById("composer"),
    input: document.getElementById("message"),
    send: document.getElementById("send"),
    stop: document.getElementById("stop"),
    hints: document.getElementById("command-hints"),
    title: document.getElementById("chat-title"),
    usage: document.getElementById("usage"),
    connection: document.getElementById("connection"),
    agentName: document.getElementById("agent-name"),
  };

  const session = Object.assign({}, data.session);
  const turns = new Map(); // turn id -> turn model
  const runTurn = new Map(); // run id -> turn id
  const lastHeard = new Map(); // run id -> when a frame of it last arrived
  const seqs = new Map(); // run id -> last stored event seq seen
  let notesTurn = null; // notes (command answers, errors) go after the newest turn

  /* ------------------------------------------------------------------ models */

  function turnFromState(state) {
    const turn = {
      id: state.turn,
      number: state.number,
      text: state.text,
      run: state.run ? { id: state.run.id, status: state.run.status, error: state.run.error || "" } : null,
      error: state.error || "",
      attachments: state.attachments || [],
      createdAt: state.created_at || null,
      finishedAt: state.finished_at || null,
      items: [],
      notes: [],
      node: null,
      dirty: true,
    };
    let userSeen = false;
    for (const message of state.messages || []) {
      if (message.role === "user" && !userSeen) {
        userSeen = true;
        continue;
      }
      addParts(turn, message.role, message.parts);
    }
    if (state.pending) {
      addParts(turn, "assistant", state.pending.parts);
      for (const [callId, result] of Object.entries(state.pending.results || {})) setResult(turn, callId, result);
    }
    for (const approval of state.approvals || []) attachApproval(turn, approval);
    for (const handoff of state.handoffs || []) addHandoff(turn, handoff);
    if (state.partial) turn.items.push({ kind: "text", text: state.partial, live: true });
    if (turn.run && turn.run.status === "completed" && state.reply) setFinalText(turn, state.reply);
    if (state.run) {
      runTurn.set(state.run.id, turn.id);
      seqs.set(state.run.id, Math.max(seqs.get(state.run.id) || 0, state.run.seq || 0));
    }
    return turn;
  }

  function addParts(turn, role, parts) {
    for (const part of parts || []) {
      if (part.type === "tool_result") {
        setResult(turn, part.tool_call_id, part);
      } else if (role === "user") {
        if (part.type === "text") turn.items.push({ kind: "note", text: part.text });
      } else if (part.type === "text") {
        if (part.text) turn.items.push({ kind: "text", text: part.text });
      } else if (part.type === "reasoning") {
        if (session.show_thinking && part.text) turn.items.push({ kind: "thinking", text: part.text });
      } else if (part.type === "tool_call") {
        upsertTool(turn, part.id, part.name, part.arguments);
      } else if (part.type === "image") {
        turn.items.push({ kind: "note", text: "[image]" });
      }
    }
  }

  function toolItem(turn, callId) {
    return turn.items.find((item) => item.kind === "tool" && item.id === callId) || null;
  }

  function upsertTool(turn, callId, name, args) {
    let item = toolItem(turn, callId);
    if (!item) {
      endLiveText(turn);
      item = { kind: "tool", id: callId, name: name, args: args, status: "running", started: Date.now() };
      turn.items.push(item);
    } else {
      if (name) item.name = name;
      if (args !== undefined) item.args = args;
    }
    return item;
  }

  function setResult(turn, callId, result) {
    const item = toolItem(turn, callId) || upsertTool(turn, callId, result.name, undefined);
    item.output = result.content !== undefined ? result.content : result.preview;
    item.isError = !!result.is_error;
    item.errorType = result.error_type || "";
    item.duration = result.duration_ms;
    item.status = item.isError ? "error" : "done";
  }

  function attachApproval(turn, approval) {
    const item = upsertTool(turn, approval.call_id, approval.tool || approval.name, approval.arguments);
    item.approval = Object.assign({}, item.approval || {}, approval);
    if ((approval.status || "pending") === "pending") item.status = "awaiting";
  }

  function endLiveText(turn) {
    for (const item of turn.items) if (item.kind === "text" || item.kind === "thinking") item.live = false;
  }

  function lastLive(turn, kind) {
    const last = turn.items[turn.items.length - 1];
    return last && last.kind === kind && last.live ? last : null;
  }

  /* A batch of streamed text at ``offset`` of the LLM call ``stream``. */
  function addStreamed(turn, kind, text, offset, stream, runId) {
    let item = lastLive(turn, kind);
    if (item && item.stream && stream && item.stream !== stream) {
      // Another call while this one is still live: the earlier call died (its
      // worker crashed) and the retry starts over. Anything else, a snapshot settles.
      if (offset !== 0) return requestResync(runId, 0);
      item.text = "";
    }
    if (!item && offset === 0) {
      if (kind === "text") endLiveText(turn);
      item = { kind: kind, text: "", live: true };
      turn.items.push(item);
    }
    if (!item) {
      requestResync(runId); // we joined mid-stream without the text so far
      return;
    }
    if (stream) item.stream = stream;
    const have = item.text.length;
    if (offset > have) {
      requestResync(runId); // a batch passed us by: a newer snapshot fills it
      return;
    }
    if (offset + text.length > have) item.text += text.slice(have - offset);
  }

  function setFinalText(turn, text) {
    // The delivered reply replaces the streamed text of the last answer (it is the
    // sanitized version, plus the failed-tools footer when tools failed).
    let lastTool = -1;
    turn.items.forEach((item, index) => {
      if (item.kind === "tool") lastTool = index;
    });
    const after = turn.items.slice(lastTool + 1).filter((item) => item.kind === "text");
    if (after.length) {
      after[after.length - 1].text = text;
      for (const item of after.slice(0, -1)) turn.items.splice(turn.items.indexOf(item), 1);
    } else if (text) {
      turn.items.push({ kind: "text", text: text });
    }
    endLiveText(turn);
  }

  /* ------------------------------------------------------------------ events */

  function turnOfRun(runId) {
    const id = runTurn.get(runId);
    return id === undefined ? null : turns.get(id) || null;
  }

  function apply(frame) {
    const runId = frame.run;
    const payload = frame.payload || {};
    if (runId !== undefined) lastHeard.set(runId, Date.now());
    if (payload.too_big) {
      // Too big to relay live: read it (and whatever follows) from the server.
      requestResync(runId, 0);
      return;
    }
    // A frame of a run whose turn is unknown yet (its worker's events overtook the
    // web process's run.queued) is dropped and fetched again: its seq must not count.
    const known = runId === undefined || frame.type === "run.queued" || frame.type === "snapshot" || turnOfRun(runId);
    if (known && typeof frame.seq === "number" && runId !== undefined && frame.type !== "chunk" && frame.type !== "thinking") {
      seqs.set(runId, Math.max(seqs.get(runId) || 0, frame.seq));
    }
    switch (frame.type) {
      case "run.queued": {
        if (!turns.has(payload.turn)) {
          turns.set(payload.turn, turnFromState({
            turn: payload.turn, number: payload.number, text: payload.text,
            run: { id: runId, status: "queued", seq: frame.seq }, messages: [],
            created_at: new Date().toISOString(),
            attachments: sentAttachments.splice(0),
          }));
        }
        runTurn.set(runId, payload.turn);
        touch(turns.get(payload.turn));
        break;
      }
      case "snapshot": {
        const state = payload.turn;
        if (!state) break;
        const turn = turnFromState(state);
        const old = turns.get(state.turn);
        if (old) {
          turn.node = old.node;
          turn.notes = old.notes;
          turn.createdAt = turn.createdAt || old.createdAt;
          turn.finishedAt = turn.finishedAt || old.finishedAt;
        }
        turns.set(state.turn, turn);
        clearResync(runId);
        touch(turn);
        break;
      }
      case "title.updated":
        setTitle(payload.title);
        break;
      case "command":
        onCommand(payload);
        break;
      case "error":
        addNote(payload.message || "Something went wrong.", "error");
        break;
      case "resync":
        // The server lost live frames on their way to us: read them from the database.
        resume();
        break;
      default:
        applyRunEvent(frame.type, runId, payload, frame);
    }
    updateControls();
  }

  function applyRunEvent(type, runId, payload, frame) {
    const turn = turnOfRun(runId);
    if (!turn) {
      if (runId !== undefined) requestResync(runId);
      return;
    }
    const run = turn.run || (turn.run = { id: runId, status: "queued" });
    switch (type) {
      case "run.started":
        if (UNFINISHED.has(run.status)) run.status = "running";
        // A resumed run (after an approval or a crashed worker): redraw it from the
        // database rather than guess what the dead attempt left on screen.
        if (payload.resumed) requestResync(runId, 0);
        break;
      case "chunk":
        if (run.status === "queued") run.status = "running";
        addStreamed(turn, "text", payload.text || "", payload.offset || 0, payload.stream, runId);
        break;
      case "thinking":
        if (session.show_thinking) addStreamed(turn, "thinking", payload.text || "", payload.offset || 0, payload.stream, runId);
        break;
      case "tool.call":
        upsertTool(turn, payload.id, payload.name, payload.arguments);
        break;
      case "tool.result":
        setResult(turn, payload.id, payload);
        break;
      case "approval_needed":
        run.status = "awaiting_approval";
        for (const call of payload.calls || []) {
          attachApproval(turn, { call_id: call.id, tool: call.name, arguments: call.arguments, reason: call.reason, details: call.details, status: "pending" });
        }
        break;
      case "approval.decided": {
        const item = toolItem(turn, payload.call_id);
        if (item) {
          item.approval = Object.assign({}, item.approval || {}, { status: payload.status, by: payload.by, always: payload.always });
          if (item.status === "awaiting") item.status = payload.status === "approved" ? "running" : "denied";
        }
        break;
      }
      case "run.completed":
        run.status = "completed";
        turn.finishedAt = new Date().toISOString();
        if (!payload.silent) setFinalText(turn, payload.text || "");
        endLiveText(turn);
        addUsage(payload);
        break;
      case "run.cancelled":
        run.status = "cancelled";
        endLiveText(turn);
        for (const item of turn.items) if (item.kind === "tool" && (item.status === "running" || item.status === "awaiting")) item.status = "cancelled";
        addUsage(payload);
        break;
      case "run.failed":
        run.status = "failed";
        turn.finishedAt = new Date().toISOString();
        run.error = payload.error || "The run failed.";
        endLiveText(turn);
        addUsage(payload);
        break;
      case "handoff":
        addHandoff(turn, payload);
        break;
      default:
        return; // future events: stored, nothing to draw yet
    }
    touch(turn);
  }

  function handoffText(handoff) {
    const to = handoff.to_name || handoff.to || "another agent";
    const from = handoff.from_name || handoff.from || "The agent";
    return `${from} handed this chat over to ${to}` + (handoff.reason ? ` (${handoff.reason})` : "") + ".";
  }

  function addHandoff(turn, payload) {
    if (turn.notes.some((note) => note.handoff === payload.to)) return;
    turn.notes.push({ kind: "note", tone: "handoff", text: handoffText(payload), handoff: payload.to });
    if (payload.to_name && el.agentName) el.agentName.textContent = payload.to_name;
  }
  /* The header's tokens and cost: what the run reported at once, then the stored
   * totals (a run resumed after an approval or a worker restart reports only its last
   * part; the session's totals count every part exactly once). */
  let usageTimer = null;

  function addUsage(payload) {
    session.input_tokens += Number(payload.input_tokens || 0);
    session.output_tokens += Number(payload.output_tokens || 0);
    session.cost = (Number(session.cost) + Number(payload.cost || 0)).toFixed(4);
    showUsage();
    refreshUsage(300);
  }

  function showUsage() {
    if (el.usage) el.usage.textContent = `${(session.input_tokens + session.output_tokens).toLocaleString()} tokens · $${session.cost}`;
  }

  function refreshUsage(delay) {
    clearTimeout(usageTimer);
    usageTimer = setTimeout(async () => {
      try {
        const response = await fetch(`/chat/s/${session.id}/usage.json`, { credentials: "same-origin" });
        if (!response.ok) return;
        const totals = await response.json();
        session.input_tokens = Number(totals.input_tokens);
        session.output_tokens = Number(totals.output_tokens);
        session.cost = Number(totals.cost).toFixed(4);
        showUsage();
      } catch (err) {
        // the figures stay as they were; the next run's end reads them again
      }
    }, delay || 0);
  }

  function setTitle(title) {
    if (!title) return;
    session.title = title;
    el.title.textContent = title;
    document.title = `${title} · Claw Platform`;
    const link = document.querySelector(`.session-link[data-session="${session.id}"] .session-title`);
    if (link) link.textContent = title;
  }

  function onCommand(payload) {
    if (payload.command === "rewind") {
      // The last turn was taken back (Regenerate, Edit, Retry): its question comes
      // back as a new turn, announced by run.queued.
      const turn = rewinding !== null ? turns.get(rewinding) : null;
      rewinding = null;
      if (turn) {
        if (turn.node) turn.node.remove();
        turns.delete(turn.id);
        if (turn.run) runTurn.delete(turn.run.id);
      }
      return;
    }
    addNote(payload.text || "", payload.status === "failed" ? "error" : "command");
    if (HISTORY_COMMANDS.has(payload.command) && payload.status !== "failed") reloadTranscript();
  }

  /* A note under the newest turn; a ``transient`` one (the offline notice) goes away
   * once the connection is back. */
  function addNote(text, kind, transient) {
    const turn = newestTurn();
    const note = { kind: "note", text: text, tone: kind, transient: !!transient };
    if (turn) {
      turn.notes.push(note);
      touch(turn);
    } else {
      if (!notesTurn) notesTurn = { id: "notes", items: [], notes: [], node: null, dirty: true, run: null, text: "" };
      notesTurn.notes.push(note);
      touch(notesTurn);
    }
  }

  function hideNotConnected() {
    for (const turn of [...turns.values(), notesTurn]) {
      if (!turn || !turn.notes.some((note) => note.transient)) continue;
      turn.notes = turn.notes.filter((note) => !note.transient);
      touch(turn);
    }
  }

  function newestTurn() {
    let newest = null;
    for (const turn of turns.values()) if (!newest || turn.id > newest.id) newest = turn;
    return newest;
  }

  /* ------------------------------------------------------------------- views */

  let frameRequested = false;
  let drawnNewest = null; // Regenerate and Edit belong to the newest turn only

  function touch(turn) {
    turn.dirty = true;
    if (!frameRequested) {
      frameRequested = true;
      requestAnimationFrame(draw);
    }
  }

  function draw() {
    frameRequested = false;
    const nearBottom = el.transcript.scrollHeight - el.transcript.scrollTop - el.transcript.clientHeight < 120;
    const ordered = [...turns.values()].sort((a, b) => a.id - b.id);
    const newest = ordered.length ? ordered[ordered.length - 1].id : null;
    if (newest !== drawnNewest) {
      drawnNewest = newest;
      for (const turn of ordered) turn.dirty = true;
    }
    if (notesTurn) ordered.push(notesTurn);
    let previous = null;
    for (const turn of ordered) {
      if (!turn.node) {
        turn.node = document.createElement("section");
        turn.node.className = "turn";
        turn.node.dataset.turn = String(turn.id);
      }
      if (turn.dirty) {
        drawTurn(turn);
        turn.dirty = false;
      }
      const expected = previous ? previous.nextSibling : el.transcript.firstChild;
      if (turn.node !== expected) el.transcript.insertBefore(turn.node, expected);
      previous = turn.node;
    }
    if (nearBottom) el.transcript.scrollTop = el.transcript.scrollHeight;
  }

  function drawTurn(turn) {
    const node = turn.node;
    const open = new Set([...node.querySelectorAll("details[open]")].map((d) => d.dataset.key));
    node.replaceChildren();
    if (turn.text) {
      const line = div("user-line");
      if (turn.editing) {
        drawEditor(turn, line);
      } else {
        const user = div("msg user-msg");
        user.textContent = turn.text;
        line.append(user);
        if (turn.attachments.length) line.append(drawAttachments(turn.attachments));
        const meta = div("user-meta");
        const stamp = timestamp(turn.createdAt);
        if (stamp) meta.append(stamp);
        if (data.can_act && isLastTurn(turn)) {
          meta.append(button("Edit", "edit-button", () => {
            turn.editing = true;
            touch(turn);
          }));
        }
        line.append(meta);
      }
      node.append(line);
    }
    const answer = div("msg assistant-msg");
    for (const item of turn.items) answer.append(drawItem(item, turn, open));
    if (turn.run) {
      const status = turn.run.status;
      if (status === "queued" || status === "running") {
        const busy = div("run-status busy");
        busy.textContent = status === "queued" ? "Queued…" : "Working…";
        answer.append(busy);
      } else if (status === "awaiting_approval") {
        const waiting = div("run-status waiting");
        waiting.textContent = "Waiting for approval";
        answer.append(waiting);
      } else if (status === "cancelled") {
        const stopped = div("run-status stopped");
        stopped.textContent = "Stopped";
        answer.append(stopped);
      } else if (status === "failed") {
        const failed = window.ClawErrors.errorBox(turn.run.error || turn.error || "");
        if (open.has("error-details")) failed.querySelector("details")?.setAttribute("open", "");
        answer.append(failed);
      }
    }
    for (const note of turn.notes) answer.append(drawItem(note, turn, open));
    const foot = drawFoot(turn);
    if (foot) answer.append(foot);
    if (answer.childNodes.length) node.append(answer);
  }

  function drawAttachments(list) {
    const box = div("user-attachments");
    for (const a of list) {
      if (a.kind === "image") {
        const img = document.createElement("img");
        img.src = `/chat/s/${session.id}/attachments/${Number(a.id)}/`;
        img.alt = a.name;
        img.className = "attachment-image";
        box.append(img);
      } else {
        box.append(span("file-chip", `${a.name} → ${a.path}`));
      }
    }
    return box;
  }

  /* Under a settled reply: when it finished, Copy (the reply's text as written). */
  function drawFoot(turn) {
    if (!turn.run || UNFINISHED.has(turn.run.status)) return null;
    const foot = div("msg-foot");
    const stamp = timestamp(turn.finishedAt);
    if (stamp) foot.append(stamp);
    const text = replyText(turn);
    if (text) foot.append(render.copyButton(() => replyText(turn), "Copy the reply"));
    if (data.can_act && isLastTurn(turn)) {
      if (turn.run.status === "failed") {
        foot.append(button("Retry", "retry-button", () => rewind(turn, "retry")));
      } else {
        foot.append(button("Regenerate", "regenerate-button", () => rewind(turn, "regenerate")));
      }
    }
    return foot.childNodes.length ? foot : null;
  }

  /* ------------------------------------------- regenerate, edit, retry */

  let rewinding = null; // the turn id taken back, until the server confirms

  function isLastTurn(turn) {
    const newest = newestTurn();
    return newest !== null && newest.id === turn.id && !!turn.run && !UNFINISHED.has(turn.run.status);
  }

  function rewind(turn, mode, text) {
    if (rewinding !== null) return;
    sentAttachments.splice(0, sentAttachments.length, ...(turn.attachments || []));
    const frame = { type: "rewind", mode: mode };
    if (mode === "edit") frame.text = text;
    if (!sendFrame(frame)) {
      addNote("Not connected yet: try again once the connection is back.", "error", true);
      return;
    }
    rewinding = turn.id;
    turn.node && turn.node.querySelectorAll(".msg-foot button, .edit-button").forEach((b) => (b.disabled = true));
    setTimeout(() => {
      if (rewinding === turn.id) rewinding = null; // refused: the error note says why
    }, 10000);
  }

  function drawEditor(turn, line) {
    const form = document.createElement("form");
    form.className = "edit-form";
    const area = document.createElement("textarea");
    area.className = "edit-text";
    area.value = turn.text;
    area.rows = Math.min(8, turn.text.split("\n").length + 1);
    area.setAttribute("aria-label", "Edit your message");
    const save = button("Save & send", "primary small", () => {});
    save.type = "submit";
    const cancel = button("Cancel", "small", () => {
      turn.editing = false;
      touch(turn);
    });
    const actions = div("edit-actions");
    actions.append(cancel, save);
    form.append(area, actions);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const text = area.value;
      if (!text.trim()) return;
      turn.editing = false;
      rewind(turn, "edit", text);
    });
    area.addEventListener("keydown", (event) => {
      if (event.key === "Escape") cancel.click();
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    line.append(form);
    setTimeout(() => area.focus(), 0);
  }

  function replyText(turn) {
    return turn.items.filter((item) => item.kind === "text").map((item) => item.text).join("\n\n");
  }

  function timestamp(iso) {
    if (!iso) return null;
    const when = new Date(iso);
    if (Number.isNaN(when.getTime())) return null;
    const node = document.createElement("time");
    node.className = "msg-time";
    node.dateTime = when.toISOString();
    node.title = when.toLocaleString();
    const today = new Date().toDateString() === when.toDateString();
    node.textContent = today
      ? when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
      : when.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
    return node;
  }

  function drawItem(item, turn, open) {
    if (item.kind === "text") {
      const box = div("assistant-text markdown" + (item.live ? " live" : ""));
      box.append(render.renderMarkdown(item.text, { live: item.live }));
      return box;
    }
    if (item.kind === "thinking") {
      const details = document.createElement("details");
      details.className = "thinking";
      details.dataset.key = "thinking";
      const summary = document.createElement("summary");
      summary.textContent = "Thinking";
      const body = div("thinking-text");
      body.textContent = item.text;
      details.append(summary, body);
      return details;
    }
    if (item.kind === "note") {
      const note = div(`note ${item.tone || ""}`.trim());
      note.textContent = item.text;
      return note;
    }
    return drawTool(item, turn, open);
  }

  const STATUS_TEXT = {
    running: "running", done: "done", error: "failed", awaiting: "needs approval",
    denied: "denied", cancelled: "cancelled",
  };

  function drawTool(item, turn, open) {
    const card = document.createElement("details");
    card.className = `tool-card status-${item.status}`;
    card.dataset.call = item.id;
    card.dataset.key = `tool-${item.id}`;
    if (open.has(card.dataset.key) || item.status === "awaiting") card.open = true;
    const summary = document.createElement("summary");
    const name = span("tool-name", item.name || "tool");
    const status = span("tool-status", STATUS_TEXT[item.status] || item.status);
    summary.append(name, status);
    if (typeof item.duration === "number") summary.append(span("tool-duration", formatDuration(item.duration)));
    card.append(summary);
    const input = document.createElement("pre");
    input.className = "tool-input";
    input.textContent = JSON.stringify(item.args === undefined ? {} : item.args, null, 2);
    card.append(labelled("Input", input));
    if (item.output !== undefined) {
      const output = document.createElement("pre");
      output.className = "tool-output";
      output.textContent = item.output;
      card.append(labelled(item.isError ? `Error (${item.errorType || "tool_error"})` : "Output", output));
    }
    if (item.approval) card.append(drawApproval(item, turn));
    return card;
  }

  function drawApproval(item, turn) {
    const box = div("approval");
    const approval = item.approval;
    const state = approval.status || "pending";
    if (state !== "pending") {
      box.textContent = `${state === "approved" ? "Approved" : "Denied"}${approval.always ? " for this session" : ""}${approval.by ? ` by ${approval.by}` : ""}`;
      return box;
    }
    const reason = div("approval-reason");
    reason.textContent = approval.reason || "This call needs your approval.";
    box.append(reason);
    const shown = drawApprovalDetails(approval.details);
    if (shown) box.append(shown);
    if (!data.can_act) return box;
    const decide = (type, always) => () => {
      sendFrame({ type: type, run: turn.run && turn.run.id, call_id: item.id, always: always });
      box.querySelectorAll("button").forEach((b) => (b.disabled = true));
    };
    box.append(
      button("Approve", "approve primary", decide("approve", false)),
      button("Always allow", "approve-always", decide("approve", true)),
      button("Deny", "deny danger", decide("deny", false)),
    );
    return box;
  }

  // What will actually run besides the arguments (issue 21): the scripts a shell
  // call runs and decoded arguments, as text (never as HTML).
  function drawApprovalDetails(details) {
    if (!details || (!(details.scripts || []).length && !(details.decoded || []).length)) return null;
    const wrap = div("approval-details");
    for (const script of details.scripts || []) {
      const head = div("approval-script-head");
      const size = typeof script.bytes === "number" ? `, ${script.bytes} bytes` : "";
      head.textContent = `Runs ${script.path} (${script.language || "unknown"}${size})` + (script.sha256 ? ` sha256 ${String(script.sha256).slice(0, 12)}…` : "");
      wrap.append(head);
      if (script.note) {
        const note = div("approval-script-note");
        note.textContent = `${script.path} ${script.note}`;
        wrap.append(note);
      }
      if (script.content) {
        const body = document.createElement("pre");
        body.className = "approval-script";
        body.textContent = script.content + (script.truncated ? "\n[… only the first 4 KB shown]" : "");
        wrap.append(body);
      }
    }
    for (const item of details.decoded || []) {
      const head = div("approval-script-head");
      head.textContent = `Decoded ${item.encoding}:`;
      const body = document.createElement("pre");
      body.className = "approval-decoded";
      body.textContent = item.text + (item.truncated ? "\n[… truncated]" : "");
      wrap.append(head, body);
    }
    return wrap;
  }

  function div(className) {
    const node = document.createElement("div");
    node.className = className;
    return node;
  }

  function span(className, text) {
    const node = document.createElement("span");
    node.className = className;
    node.textContent = text;
    return node;
  }

  function button(text, className, onClick) {
    const node = document.createElement("button");
    node.type = "button";
    node.className = className;
    node.textContent = text;
    node.addEventListener("click", onClick);
    return node;
  }

  function labelled(label, content) {
    const wrap = div("tool-section");
    wrap.append(span("tool-label", label), content);
    return wrap;
  }

  function formatDuration(ms) {
    return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
  }

  function updateControls() {
    const busy = [...turns.values()].some((t) => t.run && UNFINISHED.has(t.run.status));
    el.stop.hidden = !busy || !data.can_act;
  }

  /* ------------------------------------------------------------------ socket */

  let socket = null;
  let attempts = 0;
  const outbox = []; // messages typed before the socket opened (sent on open)
  let closedForGood = false;
  const resyncTimers = new Map();

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}${data.socket}`);
    socket.addEventListener("open", () => {
      attempts = 0;
      el.connection.hidden = true;
      document.body.dataset.socket = "open";
      hideNotConnected();
      refreshUsage(0);
      resume();
      for (const frame of outbox.splice(0)) sendFrame(frame);
    });
    socket.addEventListener("message", (event) => {
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch (err) {
        return;
      }
      apply(frame);
    });
    socket.addEventListener("close", (event) => {
      socket = null;
      document.body.dataset.socket = "closed";
      if (event.code === 4401) {
        location.href = "/chat/login/?next=" + encodeURIComponent(location.pathname);
        return;
      }
      if (event.code === 4403) {
        // Your role in the team changed: the page is drawn again for the new one.
        location.reload();
        return;
      }
      if (event.code === 4404) {
        closedForGood = true;
        addNote("This chat is not available to you.", "error");
        return;
      }
      if (closedForGood) return;
      el.connection.hidden = false;
      const delay = Math.min(10000, 500 * 2 ** attempts++);
      setTimeout(connect, delay);
    });
  }

  function resume() {
    // Everything after the last stored event of the newest run we know, plus a
    // snapshot of every unfinished run (the server reads both from the database).
    const runs = [...runTurn.keys()];
    if (!runs.length) {
      sendFrame({ type: "resume" });
      return;
    }
    const newest = Math.min(...runs.filter((id) => {
      const turn = turnOfRun(id);
      return turn && turn.run && UNFINISHED.has(turn.run.status);
    }).concat([Math.max(...runs)]));
    sendFrame({ type: "resume", run: newest, after: seqs.get(newest) || 0 });
  }

  /* Ask for a snapshot of the run (and the events we missed), after ``delay`` ms:
   * by default long enough for the worker's next partial-text checkpoint. */
  function requestResync(runId, delay) {
    if (runId === undefined || resyncTimers.has(runId)) return;
    resyncTimers.set(runId, setTimeout(() => {
      resyncTimers.delete(runId);
      sendFrame({ type: "resume", run: runId, after: seqs.get(runId) || 0 });
    }, delay === undefined ? RESYNC_AFTER_MS : delay));
  }

  function resyncQuietRuns() {
    if (!socket || socket.readyState !== WebSocket.OPEN) return;
    const now = Date.now();
    for (const turn of turns.values()) {
      const run = turn.run;
      if (!run || (run.status !== "running" && run.status !== "queued")) continue;
      if (!lastHeard.has(run.id)) lastHeard.set(run.id, now);
      if (now - lastHeard.get(run.id) >= QUIET_RESYNC_MS) {
        lastHeard.set(run.id, now);
        requestResync(run.id, 0);
      }
    }
  }

  function clearResync(runId) {
    const timer = resyncTimers.get(runId);
    if (timer !== undefined) {
      clearTimeout(timer);
      resyncTimers.delete(runId);
    }
  }

  function sendFrame(frame) {
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify(frame));
      return true;
    }
    return false;
  }

  async function reloadTranscript() {
    try {
      const response = await fetch(`/chat/s/${session.id}/transcript.json`, { credentials: "same-origin" });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const fresh = await response.json();
      if (fresh.session && el.agentName) el.agentName.textContent = fresh.session.agent;
      if (fresh.session && agentPicker) agentPicker.value = fresh.session.agent_slug;
      for (const turn of turns.values()) if (turn.node) turn.node.remove();
      turns.clear();
      runTurn.clear();
      for (const state of fresh.turns) turns.set(state.turn, turnFromState(state));
      const last = newestTurn();
      if (last) touch(last);
      for (const turn of turns.values()) touch(turn);
      updateControls();
    } catch (err) {
      addNote(`Could not reload the conversation (${err.message}).`, "error");
    }
  }

  /* ---------------------------------------------------------------- composer */

  function submit(event) {
    if (event) event.preventDefault();
    const text = el.input.value;
    const ready = attachments.filter((a) => a.id);
    if (attachments.some((a) => !a.id && !a.error)) {
      addNote("Wait a moment: an attachment is still uploading.", "command", true);
      return;
    }
    if (!text.trim() && !ready.length) return;
    const frame = { type: "message", text: text };
    if (ready.length) {
      frame.attachments = ready.map((a) => a.id);
      sentAttachments.push(...ready.map((a) => ({ id: a.id, kind: a.kind, name: a.name, path: a.path })));
    }
    attachments.length = 0;
    drawChips();
    if (!sendFrame(frame)) {
      if (closedForGood) return;
      outbox.push(frame);
      el.connection.hidden = false;
      addNote("Not connected yet: your message goes out as soon as the connection is back.", "command", true);
    }
    el.input.value = "";
    autosize();
    hideHints();
  }

  /* Attachments (E23): each file is uploaded when picked; the message frame names
   * them by id. Images go to the model, other files into the member's workspace. */
  const attachments = []; // {name, id?, kind?, path?, error?}
  const sentAttachments = []; // what the next new turn of this tab carries
  const chips = document.getElementById("attachment-chips");
  const attachInput = document.getElementById("attach-input");

  function drawChips() {
    if (!chips) return;
    chips.replaceChildren(...attachments.map((a, index) => {
      const li = document.createElement("li");
      li.className = "attachment-chip" + (a.error ? " failed" : "");
      li.append(span("chip-name", a.error ? `${a.name}: ${a.error}` : a.id ? a.name : `${a.name} (uploading…)`));
      li.append(button("✕", "chip-remove", () => {
        attachments.splice(index, 1);
        drawChips();
      }));
      return li;
    }));
    chips.hidden = !attachments.length;
  }

  async function upload(file) {
    const entry = { name: file.name };
    attachments.push(entry);
    drawChips();
    try {
      const response = await fetch(`/chat/s/${session.id}/attachments/?name=${encodeURIComponent(file.name)}`, {
        method: "POST",
        body: file,
        credentials: "same-origin",
        headers: { "X-CSRFToken": csrfToken(), "Content-Type": "application/octet-stream" },
      });
      const body = await response.json().catch(() => ({}));
      if (!response.ok) throw new Error((body.error && body.error.message) || `the upload failed (HTTP ${response.status})`);
      Object.assign(entry, { id: body.id, kind: body.kind, path: body.workspace_path });
    } catch (err) {
      entry.error = err.message;
    }
    drawChips();
  }

  function csrfToken() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  if (attachInput) {
    document.getElementById("attach").addEventListener("click", () => attachInput.click());
    attachInput.addEventListener("change", () => {
      for (const file of attachInput.files) upload(file);
      attachInput.value = "";
    });
  }

  function autosize() {
    el.input.style.height = "auto";
    el.input.style.height = `${Math.min(el.input.scrollHeight, 240)}px`;
  }

  let hintIndex = 0;

  function showHints() {
    const text = el.input.value;
    if (!text.startsWith("/") || text.includes(" ") || text.includes("\n")) return hideHints();
    const prefix = text.slice(1).toLowerCase();
    const matches = data.commands.filter((c) => c.name.startsWith(prefix));
    if (!matches.length) return hideHints();
    hintIndex = Math.min(hintIndex, matches.length - 1);
    el.hints.replaceChildren(...matches.map((command, index) => {
      const li = document.createElement("li");
      li.setAttribute("role", "option");
      li.dataset.command = command.name;
      li.className = index === hintIndex ? "selected" : "";
      li.append(span("hint-name", `/${command.name}`), span("hint-text", command.hint));
      li.addEventListener("mousedown", (event) => {
        event.preventDefault();
        complete(command.name);
      });
      return li;
    }));
    el.hints.hidden = false;
  }

  function hideHints() {
    el.hints.hidden = true;
    hintIndex = 0;
  }

  function complete(name) {
    el.input.value = `/${name} `;
    hideHints();
    el.input.focus();
  }

  el.composer.addEventListener("submit", submit);
  el.input.addEventListener("input", () => {
    autosize();
    showHints();
  });
  el.input.addEventListener("keydown", (event) => {
    if (!el.hints.hidden) {
      const options = [...el.hints.children];
      if (event.key === "ArrowDown" || event.key === "ArrowUp") {
        event.preventDefault();
        hintIndex = (hintIndex + (event.key === "ArrowDown" ? 1 : -1) + options.length) % options.length;
        showHints();
        return;
      }
      if (event.key === "Tab") {
        event.preventDefault();
        complete(options[hintIndex].dataset.command);
        return;
      }
      if (event.key === "Escape") return hideHints();
    }
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) submit(event);
  });
  el.stop.addEventListener("click", () => sendFrame({ type: "stop" }));

  /* The header's pickers send the same commands a person can type (/agent, /model):
   * the server answers them like typed ones, and the answer shows as a note. */
  const agentPicker = document.getElementById("agent-picker");
  const modelPicker = document.getElementById("model-picker");
  function pick(text, picker, previous) {
    if (!sendFrame({ type: "message", text: text })) {
      picker.value = previous;
      addNote("Not connected yet: pick again once the connection is back.", "command", true);
      return false;
    }
    return true;
  }
  if (agentPicker) {
    let agentNow = agentPicker.value;
    agentPicker.addEventListener("change", () => {
      if (pick(`/agent ${agentPicker.value}`, agentPicker, agentNow)) agentNow = agentPicker.value;
    });
  }
  if (modelPicker) {
    let modelNow = modelPicker.value;
    modelPicker.addEventListener("change", () => {
      if (pick(`/model ${modelPicker.value || "default"}`, modelPicker, modelNow)) modelNow = modelPicker.value;
    });
  }

  /* ------------------------------------------------------------------- start */

  for (const state of data.turns) turns.set(state.turn, turnFromState(state));
  for (const turn of turns.values()) touch(turn);
  updateControls();
  connect();
  setInterval(resyncQuietRuns, 2000);
  window.addEventListener("beforeunload", () => {
    closedForGood = true;
    if (socket) socket.close();
  });
})();
