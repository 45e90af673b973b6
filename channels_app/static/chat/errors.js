/* A failed reply in plain language (issue 26, item 3): what happened and what to do,
 * with the technical message (the provider's words, the HTTP status) behind a
 * "Technical details" disclosure. The server's message is shown as text only. */
(function () {
  "use strict";

  // First match wins: [test on the technical message, plain sentence].
  const RULES = [
    [/stopped by the user|cancel/i, "You stopped this reply."],
    [/HTTP 429|rate.?limit|too many requests/i, "The model provider is rate-limiting us. Wait a moment, then press Retry."],
    [/HTTP 401|HTTP 403|auth|api key|credential|permission/i, "The model provider refused our credentials. A team admin needs to check the provider's API key."],
    [/HTTP 404|model not found|not_found|does not exist|unknown model/i, "The model provider does not know this model. A team admin needs to check the agent's model name."],
    [/HTTP 529|overloaded/i, "The model provider is overloaded right now. Try again in a minute."],
    [/HTTP 5\d\d|server error|internal error|bad gateway|unavailable/i, "The model provider had a problem on its side. Try again in a minute."],
    [/ended before it was complete|cut off|truncat|incomplete|stream/i, "The provider's reply was cut off before it was complete."],
    [/timed? ?out|timeout|deadline/i, "The model provider took too long to answer."],
    [/connect|network|unreachable|refused|resolve|dns/i, "We could not reach the model provider. Check the provider's address, or try again shortly."],
    [/budget|spend|limit reached|quota/i, "A spending limit stops this reply. A team admin can raise the budget."],
    [/context|too long|too many tokens|maximum length/i, "The conversation is too long for this model. Start a new chat or use /compact."],
    [/HTTP 400|bad request|invalid/i, "The model provider refused the request as invalid."],
    [/database/i, "The reply could not be saved because the database was unavailable. Try again."],
  ];

  function plain(technical) {
    const text = String(technical || "");
    for (const [test, sentence] of RULES) if (test.test(text)) return sentence;
    return "This reply failed.";
  }

  /* The error box: the plain sentence, then the technical message in a <details>. */
  function errorBox(technical) {
    const box = document.createElement("div");
    box.className = "run-error";
    box.setAttribute("role", "alert");
    const sentence = document.createElement("p");
    sentence.className = "run-error-text";
    sentence.textContent = plain(technical);
    box.append(sentence);
    if (technical) {
      const details = document.createElement("details");
      details.className = "run-error-details";
      details.dataset.key = "error-details";
      const summary = document.createElement("summary");
      summary.textContent = "Technical details";
      const body = document.createElement("pre");
      body.textContent = String(technical);
      details.append(summary, body);
      box.append(details);
    }
    return box;
  }

  window.ClawErrors = { plain: plain, errorBox: errorBox };
})();
