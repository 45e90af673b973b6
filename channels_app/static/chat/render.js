/* Safe markdown for agent replies (U3).
 *
 * marked turns markdown into HTML; DOMPurify removes everything that could run or
 * phone home: scripts, event handlers, styles, forms, frames, and every URL scheme
 * but http(s) and mailto in links. Images never load: a markdown image becomes a
 * link the reader may follow, and <img> is forbidden outright. The page's
 * Content-Security-Policy (img-src 'self', no inline script) is the second wall.
 */
(function () {
  "use strict";

  const FORBID_TAGS = [
    "img", "image", "picture", "source", "video", "audio", "track", "iframe", "frame", "frameset",
    "object", "embed", "form", "input", "button", "select", "textarea", "style", "link", "meta",
    "base", "svg", "math", "template", "dialog",
  ];
  const SAFE_HREF = /^(https?:\/\/|mailto:)/i;

  const renderer = new marked.Renderer();
  renderer.image = function (token) {
    const href = token && token.href ? token.href : "";
    const text = token && token.text ? token.text : "image";
    // Escaped here; DOMPurify checks the href below like any other link.
    return '<a href="' + escapeAttr(href) + '" class="image-link">[image: ' + escapeHtml(text) + "]</a>";
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

  /* Markdown -> a sanitized DocumentFragment. */
  function renderMarkdown(text) {
    const html = marked.parse(String(text || ""));
    return DOMPurify.sanitize(html, {
      FORBID_TAGS: FORBID_TAGS,
      FORBID_ATTR: ["style", "srcset", "action", "formaction"],
      ALLOW_DATA_ATTR: false,
      RETURN_DOM_FRAGMENT: true,
    });
  }

  window.ClawRender = { renderMarkdown: renderMarkdown, escapeHtml: escapeHtml };
})();
