// Small behaviours for the lesson pages: glossary popovers (Esc to dismiss), copy buttons for
// prompts, and keyboard-operable ordering questions. Everything re-initialises after htmx swaps.
(function () {
  "use strict";

  var ko = document.documentElement.lang === "ko";

  // Glossary: the popover shows on hover and keyboard focus (CSS); Esc hides it until the
  // pointer or focus leaves (WCAG 1.4.13 dismissible). A tap (touch or pen) opens it instead of
  // leaving the page; a second tap on the same term follows the link to the glossary. Keyboard
  // Enter and mouse clicks follow the link as before.
  var lastPointer = "mouse";
  document.addEventListener("pointerdown", function (event) { lastPointer = event.pointerType; }, true);

  function closeTips(except) {
    document.querySelectorAll(".gloss.open").forEach(function (g) { if (g !== except) g.classList.remove("open"); });
  }

  // Keep a popover inside the window (a term near the right edge of a phone pushed it off-screen).
  function placeTip(g) {
    var tip = g.querySelector(".gloss-tip");
    if (!tip) return;
    tip.style.left = "0";
    var box = tip.getBoundingClientRect();
    if (!box.width) return;
    var room = document.documentElement.clientWidth - 8;
    if (box.right > room) tip.style.left = Math.min(0, room - box.right) + "px";
    box = tip.getBoundingClientRect();
    if (box.left < 8) tip.style.left = (parseFloat(tip.style.left) + 8 - box.left) + "px";
  }

  document.addEventListener("click", function (event) {
    var term = event.target.closest && event.target.closest(".gloss-term");
    if (!term) {
      if (!(event.target.closest && event.target.closest(".gloss"))) closeTips(null);
      return;
    }
    var g = term.closest(".gloss");
    var tapped = event.detail > 0 && (lastPointer === "touch" || lastPointer === "pen");
    if (!tapped || g.classList.contains("open")) return;
    event.preventDefault();
    closeTips(g);
    g.classList.remove("dismissed");
    g.classList.add("open");
    placeTip(g);
  });
  ["mouseover", "focusin"].forEach(function (type) {
    document.addEventListener(type, function (event) {
      var g = event.target.closest && event.target.closest(".gloss");
      if (g) placeTip(g);
    });
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    document.querySelectorAll(".gloss:hover, .gloss:focus-within, .gloss.open").forEach(function (g) {
      g.classList.add("dismissed");
      g.classList.remove("open");
    });
  });
  document.addEventListener("focusout", function (event) {
    var g = event.target.closest && event.target.closest(".gloss");
    if (g) g.classList.remove("dismissed");
  });
  document.addEventListener("mouseout", function (event) {
    var g = event.target.closest && event.target.closest(".gloss");
    if (g && !g.contains(event.relatedTarget)) g.classList.remove("dismissed");
  });

  // The section sidebar: open beside the text on a wide screen, one closed line above it on a
  // phone (the same element in the same place, so the tab order is the visual order).
  var narrow = window.matchMedia("(max-width: 900px)");
  function fitSidebar() {
    document.querySelectorAll("[data-sidebar]").forEach(function (box) { box.open = !narrow.matches; });
  }
  if (narrow.addEventListener) narrow.addEventListener("change", fitSidebar);

  // The table of contents marks the subsection being read.
  function markSubsection() {
    var links = document.querySelectorAll(".toc-sub a[data-anchor]");
    if (!links.length) return;
    // The last heading above the top third of the window (or on screen, at the page's end).
    var line = window.innerHeight / 3;
    if (window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 2) line = window.innerHeight;
    var here = null;
    links.forEach(function (a) {
      var heading = document.getElementById(a.dataset.anchor);
      if (heading && heading.getBoundingClientRect().top < line) here = a;
    });
    links.forEach(function (a) {
      if (a === here) a.setAttribute("aria-current", "location"); else a.removeAttribute("aria-current");
    });
  }
  var marking = false;
  window.addEventListener("scroll", function () {
    if (marking) return;
    marking = true;
    requestAnimationFrame(function () { marking = false; markSubsection(); });
  }, { passive: true });

  // Wide figures scroll inside their own box on a phone: say so above the box, and drop the
  // edge mark once the learner has scrolled to the end.
  function markScrollers(root) {
    root.querySelectorAll(".diagram .dg-scroll").forEach(function (box) {
      var scrolls = box.scrollWidth > box.clientWidth + 1;
      box.classList.toggle("scrolls", scrolls);
      var cue = box.previousElementSibling;
      var hasCue = cue && cue.classList.contains("scroll-cue");
      if (scrolls && !hasCue) {
        cue = document.createElement("span");
        cue.className = "scroll-cue";
        cue.setAttribute("aria-hidden", "true");  // the box's own label says it scrolls
        cue.textContent = ko ? "← 옆으로 밀어서 끝까지 보기 →" : "← Slide sideways to see all of it →";
        box.parentElement.insertBefore(cue, box);
      } else if (!scrolls && hasCue) {
        cue.remove();
      }
      if (!box.dataset.cueReady) {
        box.dataset.cueReady = "1";
        box.addEventListener("scroll", function () {
          box.classList.toggle("at-end", box.scrollLeft + box.clientWidth >= box.scrollWidth - 2);
        }, { passive: true });
      }
    });
  }
  window.addEventListener("resize", function () { markScrollers(document); });

  function addCopyButtons(root) {
    root.querySelectorAll("pre > code.language-prompt").forEach(function (code) {
      var pre = code.parentElement;
      if (pre.dataset.copyReady) return;
      pre.dataset.copyReady = "1";
      pre.classList.add("prompt-block");
      var button = document.createElement("button");
      button.type = "button";
      button.className = "copy-button";
      button.textContent = document.body.dataset.copyLabel || "Copy";
      button.addEventListener("click", function () {
        var done = function () {
          button.textContent = document.body.dataset.copiedLabel || "Copied";
          setTimeout(function () { button.textContent = document.body.dataset.copyLabel || "Copy"; }, 2000);
        };
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(code.textContent).then(done);
        } else {  // http://127.0.0.1 is a secure context, but a LAN address is not
          var area = document.createElement("textarea");
          area.value = code.textContent;
          document.body.appendChild(area);
          area.select();
          document.execCommand("copy");
          area.remove();
          done();
        }
      });
      pre.parentElement.insertBefore(button, pre);
    });
  }

  // Ordering questions: Up/Down buttons move an item; focus stays on the moved item's button
  // and a polite live region says where it went. Dragging works too, as a shortcut.
  function announce(list, item) {
    var status = list.parentElement.querySelector("[data-ordering-status]");
    if (!status) return;
    var position = Array.prototype.indexOf.call(list.children, item) + 1;
    var text = item.querySelector(".ordering-text").textContent;
    status.textContent = ko ? "“" + text + "” → " + position + "번째" : "“" + text + "” moved to position " + position;
  }

  function move(item, direction) {
    var list = item.parentElement;
    if (direction === "up" && item.previousElementSibling) {
      list.insertBefore(item, item.previousElementSibling);
    } else if (direction === "down" && item.nextElementSibling) {
      list.insertBefore(item.nextElementSibling, item);
    } else {
      return;
    }
    announce(list, item);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-move]");
    if (!button) return;
    var item = button.closest(".ordering-item");
    move(item, button.dataset.move);
    button.focus();
  });

  var dragged = null;
  document.addEventListener("dragstart", function (event) {
    dragged = event.target.closest && event.target.closest(".ordering-item");
    if (dragged) event.dataTransfer.effectAllowed = "move";
  });
  document.addEventListener("dragover", function (event) {
    var over = event.target.closest && event.target.closest(".ordering-item");
    if (!dragged || !over || over === dragged || over.parentElement !== dragged.parentElement) return;
    event.preventDefault();
    var box = over.getBoundingClientRect();
    var after = event.clientY > box.top + box.height / 2;
    over.parentElement.insertBefore(dragged, after ? over.nextElementSibling : over);
  });
  document.addEventListener("dragend", function () {
    if (dragged) announce(dragged.parentElement, dragged);
    dragged = null;
  });

  // Matching answers: a closed select shows one line, so on a phone the chosen answer's whole
  // text is echoed under it (CSS shows the echo on narrow screens only).
  document.addEventListener("change", function (event) {
    var select = event.target;
    if (!select.matches || !select.matches(".matching select")) return;
    var echo = select.parentElement.querySelector("[data-match-echo]");
    if (echo) echo.textContent = select.value ? select.options[select.selectedIndex].text : "";
  });

  document.addEventListener("DOMContentLoaded", function () {
    addCopyButtons(document);
    fitSidebar();
    markSubsection();
    // A form sent back with errors: start at the first field that needs fixing.
    var invalid = document.querySelector("form [aria-invalid=true]");
    if (invalid) invalid.focus();
    markScrollers(document);
  });
  document.addEventListener("htmx:afterSwap", function (event) { addCopyButtons(event.target); });
  // A self-check submit disables its button while the answer is graded, and a disabled element
  // drops keyboard focus to <body>: give it back once the button is enabled again (the feedback
  // is announced by its live region), so Tab goes on from the question, not from the page top.
  var submitted = null;
  document.addEventListener("htmx:beforeRequest", function (event) {
    var form = event.target.closest && event.target.closest(".question form");
    submitted = form && form.contains(document.activeElement) ? document.activeElement : null;
  });
  document.addEventListener("htmx:afterSettle", function () {
    var el = submitted;
    submitted = null;
    if (!el || (document.activeElement && document.activeElement !== document.body)) return;
    setTimeout(function () { if (!el.disabled && document.body.contains(el)) el.focus(); }, 0);
  });
})();
