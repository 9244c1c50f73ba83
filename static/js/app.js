// Small behaviours for the lesson pages: glossary popovers (Esc to dismiss), copy buttons for
// prompts, and keyboard-operable ordering questions. Everything re-initialises after htmx swaps.
(function () {
  "use strict";

  // Glossary: the popover shows on hover and keyboard focus (CSS); Esc hides it until the
  // pointer or focus leaves (WCAG 1.4.13 dismissible).
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    document.querySelectorAll(".gloss:hover, .gloss:focus-within").forEach(function (g) {
      g.classList.add("dismissed");
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
    var lang = document.documentElement.lang;
    status.textContent = lang === "ko" ? "“" + text + "” → " + position + "번째" : "“" + text + "” moved to position " + position;
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

  document.addEventListener("DOMContentLoaded", function () { addCopyButtons(document); });
  document.addEventListener("htmx:afterSwap", function (event) { addCopyButtons(event.target); });
})();
