package httpapi

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
)

// changes lists, per turn, the files the turn changed in the person's
// folder: {turns:[{turn, message_id, commit, files:[{path, status,
// insertions, deletions}]}]}.
func (s *Server) changes(c *gin.Context) {
	chat, ok := s.session(c)
	if !ok {
		return
	}
	c.JSON(http.StatusOK, gin.H{"session_id": chat.ID, "turns": chat.Changes()})
}

// turnDiff is one turn's changes with their unified diff.
func (s *Server) turnDiff(c *gin.Context) {
	chat, ok := s.session(c)
	if !ok {
		return
	}
	turn, err := strconv.Atoi(c.Param("turn"))
	if err != nil || turn < 1 {
		s.fail(c, badRequest("turn must be a turn number (1, 2, ...)"))
		return
	}
	d, err := s.cfg.Registry.Diff(c.Request.Context(), chat, turn)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, d)
}
