/* Safe markdown for agent replies (U3).
 *
 * marked turns markdown into HTML; DOMPurify removes everything that could run or
 * phone home: scripts, event handlers, styles, forms, frames, and every URL scheme
 * but http(s) and mailto in links. Raw HTML written in a reply is shown as text (a
 * reply explaining "use the <img> tag" keeps its words). Images never load: a
 * markdown image becomes a link the reader may follow, and <img> is forbidden
 * outright. A link whose address was unsafe is neutralised into plain text that no
 * longer looks like a link. Code blocks are highlighted by highlight.js (working on
 * the already sanitized text, its output is escaped) and get a Copy button. The
 * page's Content-Security-Policy (img-src 'self', no inline script) is the second wall.
 */
(function () {
  "use strict";

  const FORBID_TAGS = [
    "img", "image", "picture", "source", "video", "audio", "track", "iframe", "frame", "frameset",
    "object", "embed", "form", "input", "button", "select", "textarea", "style", "link", "meta",
    "base", "svg", "math", "template", "dialog",
  ];
  const SAFE_HREF = /^(https?:\/\/|mailto:)/i;
  const MAX_HIGHLIGHT_CHARS = 100000;

  const renderer = new marked.Renderer();
  renderer.image = function (token) {
    const href = token && token.href ? token.href : "";
    const text = token && token.text ? token.text : "image";
    // Escaped here; DOMPurify checks the href below like any other link.
    return '<a href="' + escapeAttr(href) + '" class="image-link">[image: ' + escapeHtml(text) + "]</a>";
  };
  // Raw HTML in a reply (block or inline) is text to read, never markup.
  renderer.html = function (token) {
    const raw = token && typeof token === "object" ? token.text || token.raw || "" : String(token || "");
    return escapeHtml(raw);
  };

  marked.setOptions({ gfm: true, breaks: true, renderer: renderer });

  DOMPurify.addHook("afterSanitizeAttributes", function (node) {
    if (node.nodeName === "A") {
      const href = node.getAttribute("href") || "";
      if (!SAFE_HREF.test(href.trim())) {
        node.removeAttribute("href");
      } else {
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", "noopener noreferrer nofollow");
      }
    }
    // Only links carry URLs: no src/action/formaction/xlink on anything else.
    for (const attr of ["src", "srcset", "action", "formaction", "xlink:href", "poster", "background"]) {
      if (node.hasAttribute && node.hasAttribute(attr)) node.removeAttribute(attr);
    }
  });

  function escapeHtml(text) {
    return String(text)
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;")
      .replace(/'/g, "&#39;");
  }

  function escapeAttr(text) {
    return escapeHtml(text);
  }

  /* A link without a (safe) address becomes a plain span: its text stays, nothing
   * about it says "click me". */
  function neutraliseLinks(fragment) {
    for (const link of fragment.querySelectorAll("a:not([href])")) {
      const span = document.createElement("span");
      span.className = "neutralised-link";
      span.title = "Link removed: its address was not safe to open";
      span.append(...link.childNodes);
      link.replaceWith(span);
    }
  }

  function highlight(fragment) {
    if (!window.hljs) return;
    for (const code of fragment.querySelectorAll("pre > code")) {
      const text = code.textContent;
      if (text.length > MAX_HIGHLIGHT_CHARS) continue;
      const match = /(?:^|\s)language-([\w+#.-]+)/.exec(code.className);
      const language = match && window.hljs.getLanguage(match[1]) ? match[1] : null;
      const result = language
        ? window.hljs.highlight(text, { language: language, ignoreIllegals: true })
        : window.hljs.highlightAuto(text);
      // highlight.js escapes the text it wraps; DOMPurify checks its markup anyway.
      code.replaceChildren(DOMPurify.sanitize(result.value, { ALLOWED_TAGS: ["span"], ALLOWED_ATTR: ["class"], RETURN_DOM_FRAGMENT: true }));
      code.classList.add("hljs");
      if (result.language) code.dataset.language = result.language;
    }
  }

  /* Copy ``text`` to the clipboard; resolves true when it was copied. */
  async function copyText(text) {
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(text);
        return true;
      }
    } catch (err) {
      // fall through to the selection-based copy
    }
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "offscreen";
    document.body.append(area);
    area.select();
    let ok = false;
    try {
      ok = document.execCommand("copy");
    } catch (err) {
      ok = false;
    }
    area.remove();
    return ok;
  }

  /* A small "Copy" button copying what ``getText()`` returns when clicked. */
  function copyButton(getText, label) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy-button";
    button.textContent = "Copy";
    button.setAttribute("aria-label", label || "Copy");
    button.addEventListener("click", async (event) => {
      event.preventDefault();
      event.stopPropagation();
      const ok = await copyText(getText());
      button.textContent = ok ? "Copied" : "Copy failed";
      button.classList.toggle("copied", ok);
      setTimeout(() => {
        button.textContent = "Copy";
        button.classList.remove("copied");
      }, 1500);
    });
    return button;
  }

  function addCodeCopyButtons(fragment) {
    for (const pre of fragment.querySelectorAll("pre")) {
      const code = pre.querySelector("code") || pre;
      const wrap = document.createElement("div");
      wrap.className = "code-block";
      pre.replaceWith(wrap);
      wrap.append(copyButton(() => code.textContent, "Copy the code"), pre);
    }
  }

  /* Markdown -> a sanitized DocumentFragment. */
  function renderMarkdown(text, options) {
    const html = marked.parse(String(text || ""));
    const fragment = DOMPurify.sanitize(html, {
      FORBID_TAGS: FORBID_TAGS,
      FORBID_ATTR: ["style", "srcset", "action", "formaction"],
      ALLOW_DATA_ATTR: false,
      RETURN_DOM_FRAGMENT: true,
    });
    neutraliseLinks(fragment);
    // A reply still streaming is highlighted once it is complete (cheaper, steadier).
    if (!(options && options.live)) {
      highlight(fragment);
      addCodeCopyButtons(fragment);
    }
    return fragment;
  }

  window.ClawRender = {
    renderMarkdown: renderMarkdown,
    escapeHtml: escapeHtml,
    copyText: copyText,
    copyButton: copyButton,
  };
})();
