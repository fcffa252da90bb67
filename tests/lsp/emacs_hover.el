;;; emacs_hover.el --- Emacs's lsp-mode runs `dsh lsp' as an add-on server beside the buffer's own  -*- lexical-binding: t -*-
;;
;; As docs/lsp.md sets Emacs up: the mode's own language server (a pygls stand-in) and dsh,
;; registered with `:add-on? t', attach to one buffer; each answers a hover of the line an agent
;; wrote.  Batch mode, no init file (Debian's site files load the elpa packages):
;;   DSH=… MOCK_URL=… DSH_HOME=… WORKSPACE=… FILE=… LINE=… EXPECTED=… OTHER="python3 other_server.py" \
;;     emacs --batch -l emacs_hover.el
;; Exits 0 when both servers attached and answered, dsh's hover containing EXPECTED.

(require 'lsp-mode)
(require 'cl-lib)

(defun dsh-test--env (name)
  (or (getenv name) (error "%s is not set" name)))

(let* ((dsh (dsh-test--env "DSH"))
       (url (dsh-test--env "MOCK_URL"))
       (workspace (file-name-as-directory (dsh-test--env "WORKSPACE")))
       (file (dsh-test--env "FILE"))
       (line (string-to-number (dsh-test--env "LINE")))
       (expected (dsh-test--env "EXPECTED"))
       (other (split-string (dsh-test--env "OTHER") " " t)))
  (setenv "DEEPSEEK_API_KEY" "sk-test")
  (setq lsp-session-file (expand-file-name (format "dsh-lsp-session-%d" (emacs-pid))
                                           temporary-file-directory)
        lsp-auto-guess-root nil
        lsp-enable-file-watchers nil
        lsp-keep-workspace-alive nil
        lsp-headerline-breadcrumb-enable nil
        lsp-modeline-code-actions-enable nil
        lsp-modeline-diagnostics-enable nil
        lsp-modeline-workspace-status-enable nil
        lsp-lens-enable nil
        lsp-enable-snippet nil
        lsp-restart 'ignore)
  ;; The user's own server for Python files...
  (lsp-register-client
   (make-lsp-client :new-connection (lsp-stdio-connection other)
                    :activation-fn (lsp-activate-on "python")
                    :priority 10
                    :server-id 'other))
  ;; ...and dsh beside it, exactly as docs/lsp.md registers it (with the test's mock).
  (lsp-register-client
   (make-lsp-client :new-connection (lsp-stdio-connection (list dsh "--base-url" url "lsp"))
                    :activation-fn (lambda (&rest _) t)
                    :add-on? t
                    :server-id 'dsh))
  (push (directory-file-name workspace) (lsp-session-folders (lsp-session)))
  (find-file file)
  (python-mode)
  (lsp)
  (let ((deadline (+ (float-time) 30)))
    (while (and (< (float-time) deadline)
                (not (and (= (length (lsp-workspaces)) 2)
                          (cl-every (lambda (ws) (eq (lsp--workspace-status ws) 'initialized))
                                    (lsp-workspaces)))))
      (accept-process-output nil 0.1)))
  (let ((names (mapcar (lambda (ws) (lsp--client-server-id (lsp--workspace-client ws)))
                       (lsp-workspaces))))
    (message "attached: %S" names)
    (unless (and (memq 'dsh names) (memq 'other names))
      (message "both servers did not attach to the buffer")
      (kill-emacs 2)))
  (goto-char (point-min))
  (forward-line line)
  (let (answers)
    (dolist (ws (lsp-workspaces))
      (with-lsp-workspace ws
        (let* ((hover (lsp-request "textDocument/hover" (lsp--text-document-position-params)))
               (contents (and hover (lsp:hover-contents hover)))
               (text (cond ((null contents) "")
                           ((stringp contents) contents)
                           ((lsp-markup-content? contents) (lsp:markup-content-value contents))
                           (t (format "%S" contents)))))
          (push (cons (lsp--client-server-id (lsp--workspace-client ws)) text) answers))))
    (dolist (answer answers)
      (message "%s: %s" (car answer) (cdr answer)))
    (let ((dsh-text (cdr (assq 'dsh answers)))
          (other-text (cdr (assq 'other answers))))
      (unless (and dsh-text (string-match-p (regexp-quote expected) dsh-text)
                   other-text (string-match-p "the user's own server" other-text))
        (message "a hover is missing")
        (kill-emacs 3))))
  (kill-emacs 0))
